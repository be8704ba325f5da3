@echo off
rem Starts a Ralph loop on this project's .claude\ralph\PROMPT.md (Windows).
rem Installed by `ralph-ctl init`. Usage: ralph-audit.bat [--headless] [--reset] [-- CLIENT_ARGS...]
rem Exit codes: 0 complete, 1 error, 2 usage, 3 a loop is already running,
rem 10 max iterations, 11 circuit open, 12 interrupted, 13 state gone, 127 client not found.
setlocal EnableExtensions DisableDelayedExpansion

set "HEADLESS=0"
set "RESET=0"
set "CLIENT_ARGS="
:parse
if "%~1"=="" goto parsed
if "%~1"=="--headless" (set "HEADLESS=1" & shift & goto parse)
if "%~1"=="--reset" (set "RESET=1" & shift & goto parse)
if "%~1"=="--" (shift & goto rest)
echo ralph-audit.bat: unknown option '%~1' (client arguments go after --) 1>&2
exit /b 2
:rest
if "%~1"=="" goto parsed
set CLIENT_ARGS=%CLIENT_ARGS% %1
shift
goto rest
:parsed

pushd "%~dp0..\.." || exit /b 1
set "PROJECT=%CD%"

if not defined RALPH_CTL set "RALPH_CTL=@RALPH_CTL@"
if not exist "%RALPH_CTL%" set "RALPH_CTL=ralph-ctl"
if not defined RALPH_CLAUDE set "RALPH_CLAUDE=claude"
where "%RALPH_CLAUDE%" >nul 2>nul || if not exist "%RALPH_CLAUDE%" (
  echo ralph-audit.bat: cannot find the Claude Code client '%RALPH_CLAUDE%'; install it or set RALPH_CLAUDE 1>&2
  exit /b 127
)

if "%RESET%"=="1" ("%RALPH_CTL%" --project "%PROJECT%" reset >nul || exit /b 1)
set "STARTED="
for /f "tokens=1,2" %%a in ('""%RALPH_CTL%" --project "%PROJECT%" start"') do (
  set "SESSION_ID=%%a"
  set "MAX=%%b"
  set "STARTED=1"
)
if not defined STARTED exit /b 3

set "PROMPT_FILE=%TEMP%\ralph-prompt-%SESSION_ID%.md"
"%RALPH_CTL%" --project "%PROJECT%" prompt > "%PROMPT_FILE%" || exit /b 1

set "RALPH_ACTIVE=1"
set /a CAP=MAX+5
if not defined CLAUDE_CODE_STOP_HOOK_BLOCK_CAP set "CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=%CAP%"

rem The prompt is multi-line, so it is passed through PowerShell, which reads
rem the file into one argument.
if "%HEADLESS%"=="1" (
  powershell -NoProfile -Command "& $env:RALPH_CLAUDE -p (Get-Content -Raw $env:PROMPT_FILE) --output-format json --session-id $env:SESSION_ID %CLIENT_ARGS%; exit $LASTEXITCODE"
) else (
  powershell -NoProfile -Command "& $env:RALPH_CLAUDE (Get-Content -Raw $env:PROMPT_FILE) --session-id $env:SESSION_ID %CLIENT_ARGS%; exit $LASTEXITCODE"
)
set "CLIENT_EXIT=%ERRORLEVEL%"
del "%PROMPT_FILE%" >nul 2>nul

"%RALPH_CTL%" --project "%PROJECT%" finish --session-id "%SESSION_ID%" --client-exit %CLIENT_EXIT%
set "CODE=%ERRORLEVEL%"
popd
exit /b %CODE%
