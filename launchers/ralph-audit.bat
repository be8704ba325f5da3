@echo off
rem Starts a Ralph loop on this project's .claude\ralph\PROMPT.md (Windows):
rem finds ralph-ctl and runs `ralph-ctl run`, which does the work (see --help).
rem Installed by `ralph-ctl init`, which writes where ralph-ctl is below.
rem Usage: ralph-audit.bat [--headless] [--reset or --resume] [-- CLIENT_ARGS...]
setlocal EnableExtensions DisableDelayedExpansion

set "INSTALLED=@RALPH_CTL@"

pushd "%~dp0..\.." || exit /b 1
set "PROJECT=%CD%"
rem A drive root ends with \, which would escape the closing quote below.
if "%PROJECT:~-1%"=="\" set "PROJECT=%PROJECT%."

set "CTL="
if defined INSTALLED if exist "%INSTALLED%" set "CTL=%INSTALLED%"
if not defined CTL if defined RALPH_CTL set "CTL=%RALPH_CTL%"
if not defined CTL for %%I in (ralph-ctl.exe) do set "CTL=%%~$PATH:I"
if not defined CTL (
  echo ralph-audit.bat: cannot find ralph-ctl; run 'ralph-ctl init' again or set RALPH_CTL 1>&2
  popd
  exit /b 1
)

"%CTL%" --project "%PROJECT%" run %*
set "CODE=%ERRORLEVEL%"
popd
exit /b %CODE%
