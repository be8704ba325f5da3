//! The units the record is kept in, each exact and comparable: money
//! ([`Usd`], millionths of a dollar), a share ([`PerMille`]), the model's
//! tokens ([`TokenUsage`]), and a process told apart from a later one with
//! its pid ([`ProcessId`]). Read by `observe`, recorded by `judge::state`.

use serde::{Deserialize, Serialize};

/// A share from 0 to 1 kept in thousandths, so a config and a state stay
/// comparable (`Eq`) where a float would not; written as the share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct PerMille(pub u32);

impl PerMille {
    /// `share` (0 to 1) rounded to thousandths; `None` outside 0..=1.
    pub fn of(share: f64) -> Option<PerMille> {
        // 0 to 1000, checked first.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        (share.is_finite() && (0.0..=1.0).contains(&share))
            .then(|| PerMille((share * 1000.0).round() as u32))
    }

    /// As people read it: `80%`, `85.5%`.
    pub fn percent(self) -> String {
        if self.0.is_multiple_of(10) {
            format!("{}%", self.0 / 10)
        } else {
            format!("{}.{}%", self.0 / 10, self.0 % 10)
        }
    }
}

/// A number that is no share from 0 to 1 (what a [`PerMille`] is read from).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("{0} is not a share from 0 to 1")]
pub struct NotAShare(pub f64);

impl TryFrom<f64> for PerMille {
    type Error = NotAShare;
    fn try_from(share: f64) -> Result<PerMille, NotAShare> {
        PerMille::of(share).ok_or(NotAShare(share))
    }
}

impl From<PerMille> for f64 {
    fn from(p: PerMille) -> f64 {
        f64::from(p.0) / 1000.0
    }
}

/// An amount of money, kept in millionths of a US dollar so that sums are
/// exact and the state stays comparable; written as a plain number of dollars.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Usd(pub u64);

impl Usd {
    /// From a dollar amount the client reported (negative or NaN count as 0).
    pub fn from_dollars(dollars: f64) -> Usd {
        if dollars.is_finite() && dollars > 0.0 {
            // Positive, checked first; an amount past u64::MAX millionths
            // (18 trillion dollars) stops there, as `as` saturates.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Usd((dollars * 1_000_000.0).round() as u64)
        } else {
            Usd(0)
        }
    }

    /// In dollars.
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    /// Nothing at all.
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }

    /// `self + other` (saturating).
    #[must_use]
    pub fn plus(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }
}

/// To the cent from a dollar up, to four places below (a cheap loop's
/// $0.0024 is not $0.00); nothing at all is $0.00.
impl std::fmt::Display for Usd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1..=99 => write!(f, "<$0.0001"),
            100..=999_999 => write!(f, "${:.4}", self.dollars()),
            _ => write!(f, "${:.2}", self.dollars()),
        }
    }
}

impl Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        f64::deserialize(d).map(Usd::from_dollars)
    }
}

/// Tokens the model read and wrote, as the API's `usage` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Input tokens not read from the cache.
    #[serde(default)]
    pub input: u64,
    /// Output tokens.
    #[serde(default)]
    pub output: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation: u64,
}

impl TokenUsage {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &TokenUsage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_creation = self.cache_creation.saturating_add(other.cache_creation);
    }

    /// True when nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == TokenUsage::default()
    }

    /// What these tokens cost on `model` at its list prices, when the
    /// model is one of [`PRICES`]' families (`None` otherwise).
    pub fn cost_on(&self, model: &str) -> Option<Usd> {
        let prices = prices_of(model)?;
        // Millionths of a dollar per million tokens, times tokens.
        let per = |tokens: u64, micro_per_mtok: u64| {
            u128::from(tokens) * u128::from(micro_per_mtok) / 1_000_000
        };
        let input = prices.input_per_mtok;
        let total = per(self.input, input)
            + per(self.output, prices.output_per_mtok)
            + per(self.cache_read, input / 10)
            + per(self.cache_creation, input + input / 4);
        Some(Usd(u64::try_from(total).unwrap_or(u64::MAX)))
    }
}

/// A model family's list prices, in millionths of a dollar per million
/// tokens; reading the cache costs a tenth of the input price, writing it
/// a quarter more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prices {
    /// What the model id contains (the first entry that matches wins).
    pub model: &'static str,
    /// Input tokens.
    pub input_per_mtok: u64,
    /// Output tokens.
    pub output_per_mtok: u64,
}

/// The list prices a live cost is estimated with, until the client reports
/// its own count (its `result`): the older, dearer models first.
pub const PRICES: &[Prices] = &[
    Prices {
        model: "opus-4-1",
        input_per_mtok: 15_000_000,
        output_per_mtok: 75_000_000,
    },
    Prices {
        model: "opus-4-2",
        input_per_mtok: 15_000_000,
        output_per_mtok: 75_000_000,
    },
    Prices {
        model: "3-opus",
        input_per_mtok: 15_000_000,
        output_per_mtok: 75_000_000,
    },
    Prices {
        model: "opus",
        input_per_mtok: 5_000_000,
        output_per_mtok: 25_000_000,
    },
    Prices {
        model: "sonnet",
        input_per_mtok: 3_000_000,
        output_per_mtok: 15_000_000,
    },
    Prices {
        model: "3-haiku",
        input_per_mtok: 250_000,
        output_per_mtok: 1_250_000,
    },
    Prices {
        model: "3-5-haiku",
        input_per_mtok: 800_000,
        output_per_mtok: 4_000_000,
    },
    Prices {
        model: "haiku",
        input_per_mtok: 1_000_000,
        output_per_mtok: 5_000_000,
    },
];

/// The prices of `model`'s family.
fn prices_of(model: &str) -> Option<&'static Prices> {
    let model = model.to_ascii_lowercase();
    PRICES.iter().find(|p| model.contains(p.model))
}

/// One process, told apart from a later one given the same pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessId {
    /// The process id.
    pub pid: u32,
    /// When it started, in the system's own units (Linux: clock ticks since
    /// boot), where the system says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_priced_by_the_model_s_family() {
        let tokens = TokenUsage {
            input: 600,
            output: 120,
            cache_read: 0,
            cache_creation: 0,
        };
        let cost = |model: &str| tokens.cost_on(model).map(|c| c.to_string());
        // 600 × $3 + 120 × $15 per million tokens.
        assert_eq!(
            cost("claude-sonnet-4-5-20250929").as_deref(),
            Some("$0.0036")
        );
        assert_eq!(cost("claude-opus-5-5").as_deref(), Some("$0.0060"));
        assert_eq!(cost("claude-opus-4-1-20250805").as_deref(), Some("$0.0180"));
        assert_eq!(cost("claude-haiku-4-5").as_deref(), Some("$0.0012"));
        assert_eq!(cost("mock-model"), None);
        let cached = TokenUsage {
            cache_read: 1_000_000,
            cache_creation: 1_000_000,
            ..TokenUsage::default()
        };
        assert_eq!(
            cached.cost_on("sonnet").unwrap(),
            Usd::from_dollars(0.3 + 3.75)
        );
    }
}
