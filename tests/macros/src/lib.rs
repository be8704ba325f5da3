//! `#[on_both_clients]`: an end-to-end scenario `fn name(client:
//! ClientVersion)` runs once per pinned client, as the tests
//! `name::v2_1_330` and `name::v2_0_77`. The scenario declares itself, so no
//! list of test names is kept (and drifts) beside the functions. Written
//! on `proc_macro` alone: what is read is the function's name and the
//! attribute's argument.
//!
//! Which client a scenario needs is declared on the scenario too, so the
//! list of what `tests/run.sh` runs on 2.0.77 lives in one place, the
//! scenarios themselves:
//!
//! - `#[on_both_clients(differs = "why")]`: the scenario's behaviour differs
//!   per client (another hook form, no sandbox, other errors...); both
//!   tests always run, and `why` says what differs.
//! - `#[on_both_clients(area_sample)]`: the one scenario of its area run on
//!   2.0.77 every time, so that each area meets the old client.
//! - `#[on_both_clients]`: the behaviour is the same on both; the
//!   `v2_0_77` test is `#[ignore]`d and runs with the whole matrix
//!   (`tests/run.sh --all`).

use proc_macro::{Delimiter, TokenStream, TokenTree};

/// The newest pinned client: every scenario runs on it.
const NEWEST: (&str, &str) = ("v2_1_330", "V2_1_330");

/// The oldest pinned client: a scenario runs on it by default only when it
/// is on the list (`differs` or `area_sample`).
const OLDEST: (&str, &str) = ("v2_0_77", "V2_0_77");

/// Why an unlisted scenario's `v2_0_77` test is ignored, and how to run it.
const MATRIX_ONLY: &str = "full client matrix: tests/run.sh --all";

/// Adds, beside the scenario function, a module of the same name with one
/// `#[test]` per client version calling it; the oldest client's is ignored
/// unless the attribute lists the scenario (see the crate's doc).
///
/// # Panics
///
/// Never on a user's input (a bad attribute is a `compile_error!`): only
/// if the code it writes were not Rust.
#[proc_macro_attribute]
pub fn on_both_clients(attr: TokenStream, item: TokenStream) -> TokenStream {
    let listed = match listed(attr) {
        Ok(listed) => listed,
        Err(message) => return error(&message),
    };
    let Some(name) = function_name(item.clone()) else {
        return error("#[on_both_clients] goes on a scenario `fn name(client: ClientVersion)`");
    };
    let test = |(test, variant): (&str, &str), ignore: &str| {
        format!(
            "#[test] {ignore} fn {test}() {{ super::{name}(::ralph_tests::client::ClientVersion::{variant}) }}"
        )
    };
    let oldest_ignore = if listed {
        String::new()
    } else {
        format!("#[ignore = {MATRIX_ONLY:?}]")
    };
    let module: TokenStream = format!(
        "mod {name} {{ {} {} }}",
        test(NEWEST, ""),
        test(OLDEST, &oldest_ignore)
    )
    .parse()
    .expect("the generated module is Rust");
    let mut out = item;
    out.extend(module);
    out
}

/// Whether the attribute puts the scenario on the oldest client's list:
/// nothing (no), `differs = "why"` with a reason, or `area_sample` (yes).
fn listed(attr: TokenStream) -> Result<bool, String> {
    const USAGE: &str = "#[on_both_clients] takes nothing, `differs = \"why the clients \
                         differ here\"` or `area_sample`";
    let tokens: Vec<TokenTree> = attr.into_iter().collect();
    match tokens.as_slice() {
        [] => Ok(false),
        [TokenTree::Ident(word)] if word.to_string() == "area_sample" => Ok(true),
        [TokenTree::Ident(word), TokenTree::Punct(eq), why]
            if word.to_string() == "differs" && eq.as_char() == '=' =>
        {
            match reason(why) {
                Some(text) if !text.trim().is_empty() => Ok(true),
                _ => Err(format!(
                    "{USAGE}: `differs` needs its reason, a non-empty string"
                )),
            }
        }
        _ => Err(USAGE.to_string()),
    }
}

/// The text of a string literal token (`"…"`), or `None` for anything else.
fn reason(token: &TokenTree) -> Option<String> {
    let literal = match token {
        TokenTree::Literal(literal) => literal.to_string(),
        // A literal that came through another macro may be wrapped in an
        // invisible group.
        TokenTree::Group(group) if group.delimiter() == Delimiter::None => {
            let mut inner = group.stream().into_iter();
            match (inner.next(), inner.next()) {
                (Some(TokenTree::Literal(literal)), None) => literal.to_string(),
                _ => return None,
            }
        }
        _ => return None,
    };
    let text = literal.strip_prefix('"')?.strip_suffix('"')?;
    Some(text.to_string())
}

/// The name after the item's `fn` keyword.
fn function_name(item: TokenStream) -> Option<String> {
    let mut tokens = item.into_iter();
    while let Some(token) = tokens.next() {
        if matches!(&token, TokenTree::Ident(i) if i.to_string() == "fn") {
            return match tokens.next() {
                Some(TokenTree::Ident(name)) => Some(name.to_string()),
                _ => None,
            };
        }
    }
    None
}

/// A `compile_error!` with `message`.
fn error(message: &str) -> TokenStream {
    format!("compile_error!({message:?});")
        .parse()
        .expect("compile_error! is Rust")
}
