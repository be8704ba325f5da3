//! Who `ralph-ctl serve` answers: only a request carrying the run's random
//! token, and a request that changes a loop only when it is a POST from the
//! page itself (same origin). Pure rules over what a request says, so that
//! each one is tested without a socket.

/// The token's length in random bytes (shown as twice as many hex digits).
const TOKEN_BYTES: usize = 32;

/// A new token: 32 random bytes from the OS, in hex (safe in a URL and in
/// the page as it is).
pub(crate) fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is `token`, in a time that does not depend on where
/// they first differ (a guess is not told how much of it was right).
pub(crate) fn same_token(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a request says about itself that the rules look at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Asked<'a> {
    /// `GET`, `POST`, …
    pub(crate) method: &'a str,
    /// The `token` of its query string, if any.
    pub(crate) token: Option<&'a str>,
    /// Its `Origin` header.
    pub(crate) origin: Option<&'a str>,
    /// Its `Sec-Fetch-Site` header.
    pub(crate) fetch_site: Option<&'a str>,
}

/// Why a request is refused (each is a 403 but for the method).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token, or not this run's.
    Token,
    /// A change asked from another site (or with no origin to tell).
    CrossSite,
    /// A change asked by another method than POST.
    Method,
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub(crate) fn status(self) -> u16 {
        match self {
            Refusal::Method => 405,
            Refusal::Token | Refusal::CrossSite => 403,
        }
    }

    /// What the refused client reads.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::Token => "refused: this address needs the token `ralph-ctl serve` printed",
            Refusal::CrossSite => {
                "refused: a change is taken only from the page itself (same origin)"
            }
            Refusal::Method => "refused: a change is a POST",
        }
    }
}

/// Whether the request may go on: every request needs the token; one that
/// changes a loop (`changes`) must also be a POST whose `Origin` is one of
/// `origins` (the server's own), and whose `Sec-Fetch-Site`, when the
/// browser sends it, is `same-origin`.
pub(crate) fn check(
    asked: &Asked<'_>,
    token: &str,
    origins: &[String],
    changes: bool,
) -> Result<(), Refusal> {
    if !asked.token.is_some_and(|t| same_token(t, token)) {
        return Err(Refusal::Token);
    }
    if !changes {
        return Ok(());
    }
    if asked.method != "POST" {
        return Err(Refusal::Method);
    }
    if asked.fetch_site.is_some_and(|s| s != "same-origin") {
        return Err(Refusal::CrossSite);
    }
    match asked.origin {
        Some(origin) if origins.iter().any(|o| o.eq_ignore_ascii_case(origin)) => Ok(()),
        _ => Err(Refusal::CrossSite),
    }
}

/// The origins a page of this server has: for a loopback address, each
/// name the machine gives it (`127.0.0.1`, `localhost`, `[::1]`) with the
/// port; for another, the address as served and the `Host` the browser
/// asked for (the name it reached the server by).
pub(crate) fn origins(addr: std::net::SocketAddr, host: Option<&str>) -> Vec<String> {
    let port = addr.port();
    let mut origins = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() {
        for name in ["127.0.0.1", "localhost", "[::1]"] {
            origins.push(format!("http://{name}:{port}"));
        }
    } else if let Some(host) = host {
        origins.push(format!("http://{host}"));
    }
    origins
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "00ff";

    fn loopback() -> Vec<String> {
        origins("127.0.0.1:4000".parse().unwrap(), Some("127.0.0.1:4000"))
    }

    #[test]
    fn a_token_is_64_hex_digits_and_new_each_time() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("00ff", TOKEN));
        assert!(!same_token("00fe", TOKEN));
        assert!(!same_token("00f", TOKEN));
        assert!(!same_token("", TOKEN));
    }

    #[test]
    fn a_read_needs_only_the_token() {
        let asked = Asked {
            method: "GET",
            token: Some(TOKEN),
            ..Default::default()
        };
        assert_eq!(check(&asked, TOKEN, &loopback(), false), Ok(()));
        let none = Asked {
            method: "GET",
            ..Default::default()
        };
        assert_eq!(check(&none, TOKEN, &loopback(), false), Err(Refusal::Token));
        let wrong = Asked {
            token: Some("00fe"),
            ..asked
        };
        assert_eq!(
            check(&wrong, TOKEN, &loopback(), false),
            Err(Refusal::Token)
        );
    }

    #[test]
    fn a_change_needs_a_post_from_the_same_origin() {
        let same = Asked {
            method: "POST",
            token: Some(TOKEN),
            origin: Some("http://127.0.0.1:4000"),
            fetch_site: Some("same-origin"),
        };
        assert_eq!(check(&same, TOKEN, &loopback(), true), Ok(()));
        let localhost = Asked {
            origin: Some("http://localhost:4000"),
            fetch_site: None,
            ..same.clone()
        };
        assert_eq!(check(&localhost, TOKEN, &loopback(), true), Ok(()));
        let get = Asked {
            method: "GET",
            ..same.clone()
        };
        assert_eq!(check(&get, TOKEN, &loopback(), true), Err(Refusal::Method));
        let other = Asked {
            origin: Some("http://evil.example"),
            fetch_site: Some("cross-site"),
            ..same.clone()
        };
        assert_eq!(
            check(&other, TOKEN, &loopback(), true),
            Err(Refusal::CrossSite)
        );
        let other_port = Asked {
            origin: Some("http://127.0.0.1:4001"),
            fetch_site: Some("same-site"),
            ..same.clone()
        };
        assert_eq!(
            check(&other_port, TOKEN, &loopback(), true),
            Err(Refusal::CrossSite)
        );
        let no_origin = Asked {
            origin: None,
            fetch_site: None,
            ..same.clone()
        };
        assert_eq!(
            check(&no_origin, TOKEN, &loopback(), true),
            Err(Refusal::CrossSite)
        );
        let no_token = Asked {
            token: None,
            ..same
        };
        assert_eq!(
            check(&no_token, TOKEN, &loopback(), true),
            Err(Refusal::Token)
        );
    }

    #[test]
    fn a_rebound_name_is_not_an_origin_of_a_loopback_server() {
        // DNS rebinding: the browser reaches 127.0.0.1 by the attacker's
        // name, and sends that name as the Host.
        let served = origins("127.0.0.1:4000".parse().unwrap(), Some("evil.example:4000"));
        assert!(!served.iter().any(|o| o.contains("evil")), "{served:?}");
    }
}
