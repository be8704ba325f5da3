//! A tool result's fields: its text, and what a file edit's result says
//! of the edit.

use super::*;

/// A tool result's `content` as text: a string, or the `text` of each
/// block joined with line breaks; its first [`MAX_ERROR_TEXT_BYTES`].
#[derive(Default)]
pub(super) struct ResultText(pub(super) String);

impl ResultText {
    pub(super) fn push(&mut self, s: &str) {
        let room = MAX_ERROR_TEXT_BYTES.saturating_sub(self.0.len());
        self.0.push_str(cut_to(s, room).0);
    }
}

impl<'de> Deserialize<'de> for ResultText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ResultText, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ResultText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tool result's content")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<ResultText, E> {
                Ok(ResultText::default())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ResultText, E> {
                let mut text = ResultText::default();
                text.push(v);
                Ok(text)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ResultText, A::Error> {
                let mut text = ResultText::default();
                let mut first = true;
                while let Some(block) = seq.next_element::<TextField>()? {
                    if let Some(part) = block.0.str() {
                        if !first {
                            text.push("\n");
                        }
                        first = false;
                        text.push(part);
                    }
                }
                Ok(text)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ResultText, A::Error> {
                skip_map(map)?;
                Ok(ResultText::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// The `text` of an object (the last one, as in a JSON tree), its first
/// [`MAX_ERROR_TEXT_BYTES`]; nothing for any other value.
#[derive(Default)]
pub(super) struct TextField(pub(super) Scalar);

impl<'de> Deserialize<'de> for TextField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TextField, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a text block")
            }
            other_values_are_default!(TextField, seq);
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextField, A::Error> {
                let mut text = Scalar::Other;
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Text => {
                            text = map.next_value_seed(ScalarSeed(MAX_ERROR_TEXT_BYTES))?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(TextField(text))
            }
        }
        d.deserialize_any(V)
    }
}

/// `toolUseResult`: whether a file edit created or patched its file.
#[derive(Default)]
pub(super) struct EditResult {
    pub(super) is_object: bool,
    pub(super) kind: Scalar,
    /// `structuredPatch`: an array, and whether it has hunks.
    pub(super) patch: Option<bool>,
}

impl EditResult {
    /// Created, or a non-empty patch, is a change; an update with an empty
    /// patch is none; anything else says nothing.
    pub(super) fn changed(&self) -> Option<bool> {
        if !self.is_object {
            return None;
        }
        if self.kind.is("create") {
            return Some(true);
        }
        self.patch
    }
}

impl<'de> Deserialize<'de> for EditResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EditResult, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EditResult;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tool's result")
            }
            other_values_are_default!(EditResult, seq);
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EditResult, A::Error> {
                let mut result = EditResult {
                    is_object: true,
                    ..EditResult::default()
                };
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Type => {
                            result.kind = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?;
                        }
                        Key::StructuredPatch => result.patch = map.next_value::<Hunks>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(result)
            }
        }
        d.deserialize_any(V)
    }
}

/// `structuredPatch`: `Some(has hunks)` for an array, `None` otherwise.
#[derive(Default)]
pub(super) struct Hunks(pub(super) Option<bool>);

impl<'de> Deserialize<'de> for Hunks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hunks, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Hunks;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a patch")
            }
            other_values_are_default!(Hunks);
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Hunks, A::Error> {
                let mut any = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Hunks(Some(any)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Hunks, A::Error> {
                skip_map(map)?;
                Ok(Hunks(None))
            }
        }
        d.deserialize_any(V)
    }
}
