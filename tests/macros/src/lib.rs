//! `#[on_both_clients]`: an end-to-end scenario `fn name(client:
//! ClientVersion)` runs once per pinned client, as the tests
//! `name::v2_1_330` and `name::v2_0_77`. The scenario declares itself, so no
//! list of test names is kept (and drifts) beside the functions. Written
//! on `proc_macro` alone: the only thing read is the function's name.

use proc_macro::{TokenStream, TokenTree};

/// The versions each scenario runs on: the test's name, and the
/// `ralph_tests::client::ClientVersion` variant.
const VERSIONS: [(&str, &str); 2] = [("v2_1_330", "V2_1_330"), ("v2_0_77", "V2_0_77")];

/// Adds, beside the scenario function, a module of the same name with one
/// `#[test]` per client version calling it.
#[proc_macro_attribute]
pub fn on_both_clients(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return error("#[on_both_clients] takes no arguments");
    }
    let Some(name) = function_name(item.clone()) else {
        return error("#[on_both_clients] goes on a scenario `fn name(client: ClientVersion)`");
    };
    let tests: String = VERSIONS
        .iter()
        .map(|(test, variant)| {
            format!(
                "#[test] fn {test}() {{ super::{name}(::ralph_tests::client::ClientVersion::{variant}) }}"
            )
        })
        .collect();
    let module: TokenStream = format!("mod {name} {{ {tests} }}")
        .parse()
        .expect("the generated module is Rust");
    let mut out = item;
    out.extend(module);
    out
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
