//! A line's `message` and its content array, folded block by block: the
//! text, the tool calls and their inputs.

use super::*;

/// `message`: its id, model and content.
#[derive(Default)]
pub(super) struct MessageFields {
    pub(super) id: Scalar,
    pub(super) model: Scalar,
    pub(super) content: Content,
}

/// Reads a [`MessageFields`].
#[derive(Clone, Copy)]
pub(super) struct MessageSeed {
    /// Whether a tool result's text may be needed (see [`classify`]).
    pub(super) results: bool,
}

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = MessageFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<MessageFields, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed {
    type Value = MessageFields;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message")
    }
    other_values_are_default!(MessageFields, seq);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageFields, A::Error> {
        let mut message = MessageFields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Id => message.id = map.next_value_seed(ScalarSeed(MAX_ID_BYTES))?,
                Key::Model => message.model = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?,
                Key::Content => {
                    message.content = map.next_value_seed(ContentSeed {
                        results: self.results,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(message)
    }
}

/// `message.content`: a string, or content blocks folded one at a time.
#[derive(Default)]
pub(super) enum Content {
    #[default]
    Other,
    Text(String),
    Blocks(Blocks),
}

/// What a line's content blocks say, folded as they are read.
pub(super) struct Blocks {
    pub(super) count: usize,
    /// The `text` blocks' texts, joined with line breaks.
    pub(super) text: String,
    pub(super) any_text: bool,
    pub(super) tool_uses: Vec<ToolUse>,
    /// Tool calls past [`MAX_LINE_ITEMS`]: counted, not kept.
    pub(super) extra_calls: usize,
    pub(super) all_tool_results: bool,
    pub(super) outcomes: Vec<ToolOutcome>,
    /// A tool result with an id past [`MAX_LINE_ITEMS`] was not kept.
    pub(super) outcomes_overflow: bool,
}

impl Blocks {
    pub(super) fn new() -> Blocks {
        Blocks {
            count: 0,
            text: String::new(),
            any_text: false,
            tool_uses: Vec::new(),
            extra_calls: 0,
            all_tool_results: true,
            outcomes: Vec::new(),
            outcomes_overflow: false,
        }
    }

    pub(super) fn add(&mut self, block: BlockFields) {
        self.count += 1;
        if !block.kind.is("tool_result") {
            self.all_tool_results = false;
        }
        if block.kind.is("text") {
            if let Some(text) = block.text.str() {
                if self.any_text {
                    self.text.push('\n');
                }
                self.any_text = true;
                self.text.push_str(text);
            }
        } else if block.kind.is("tool_use") {
            if self.tool_uses.len() >= MAX_LINE_ITEMS {
                self.extra_calls += 1;
                return;
            }
            let mut name = block.name.into_string().unwrap_or_default();
            let mut edited_file = None;
            if let Some((_, field)) = EDIT_TOOLS.iter().find(|(tool, _)| *tool == name) {
                let path = if *field == "file_path" {
                    block.file_path
                } else {
                    block.notebook_path
                };
                match path {
                    Scalar::Str { cut: true, .. } => {
                        // No such file can be written: a call whose effect
                        // is not described, like an unknown tool's.
                        name.clear();
                    }
                    path => edited_file = path.into_string(),
                }
            }
            self.tool_uses.push(ToolUse {
                id: block.id.into_string(),
                name,
                edited_file,
                command: block.command.into_string(),
            });
        } else if block.kind.is("tool_result") {
            if self.outcomes.len() >= MAX_LINE_ITEMS {
                if block.tool_use_id.str().is_some() {
                    self.outcomes_overflow = true;
                }
                return;
            }
            self.outcomes.push(ToolOutcome {
                tool_use_id: block.tool_use_id.into_string(),
                error: block.is_error.is_true().then_some(block.result_text),
                changed: None,
            });
        }
    }
}

/// Reads a [`Content`].
#[derive(Clone, Copy)]
pub(super) struct ContentSeed {
    /// Whether a tool result's text may be needed (see [`classify`]).
    pub(super) results: bool,
}

impl<'de> DeserializeSeed<'de> for ContentSeed {
    type Value = Content;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Content, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ContentSeed {
    type Value = Content;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or content blocks")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_none<E: de::Error>(self) -> Result<Content, E> {
        Ok(Content::Other)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
        Ok(Content::Text(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Content, E> {
        Ok(Content::Text(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
        let mut blocks = Blocks::new();
        while let Some(block) = seq.next_element_seed(BlockSeed {
            results: self.results,
        })? {
            blocks.add(block);
        }
        Ok(Content::Blocks(blocks))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Content, A::Error> {
        skip_map(map)?;
        Ok(Content::Other)
    }
}

/// One content block's fields (an assistant's text or tool call, a tool
/// result); a block that is not an object has none.
#[derive(Default)]
pub(super) struct BlockFields {
    pub(super) kind: Scalar,
    pub(super) text: Scalar,
    pub(super) id: Scalar,
    pub(super) name: Scalar,
    pub(super) tool_use_id: Scalar,
    pub(super) is_error: Scalar,
    pub(super) file_path: Scalar,
    pub(super) notebook_path: Scalar,
    pub(super) command: Scalar,
    /// A tool result's text (its `content`: a string or text blocks),
    /// its first [`MAX_ERROR_TEXT_BYTES`].
    pub(super) result_text: String,
}

/// Reads a [`BlockFields`].
#[derive(Clone, Copy)]
pub(super) struct BlockSeed {
    /// Whether a tool result's text may be needed (see [`classify`]).
    pub(super) results: bool,
}

impl<'de> DeserializeSeed<'de> for BlockSeed {
    type Value = BlockFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<BlockFields, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BlockSeed {
    type Value = BlockFields;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content block")
    }
    other_values_are_default!(BlockFields, seq);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BlockFields, A::Error> {
        let mut block = BlockFields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => block.kind = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?,
                Key::Text => block.text = map.next_value_seed(ScalarSeed(usize::MAX))?,
                Key::Id => block.id = map.next_value_seed(ScalarSeed(MAX_ID_BYTES))?,
                Key::Name => block.name = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?,
                Key::ToolUseId => {
                    block.tool_use_id = map.next_value_seed(ScalarSeed(MAX_ID_BYTES))?;
                }
                Key::IsError => block.is_error = map.next_value_seed(ScalarSeed(0))?,
                Key::Input => {
                    let input: InputFields = map.next_value()?;
                    block.file_path = input.file_path;
                    block.notebook_path = input.notebook_path;
                    block.command = input.command;
                }
                Key::Content if self.results => {
                    block.result_text = map.next_value::<ResultText>()?.0;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(block)
    }
}

/// A tool call's `input`: the file an edit tool names, the command a
/// shell tool runs.
#[derive(Default)]
pub(super) struct InputFields {
    pub(super) file_path: Scalar,
    pub(super) notebook_path: Scalar,
    pub(super) command: Scalar,
}

impl<'de> Deserialize<'de> for InputFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<InputFields, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tool input")
            }
            other_values_are_default!(InputFields, seq);
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputFields, A::Error> {
                let mut input = InputFields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::FilePath => {
                            input.file_path = map.next_value_seed(ScalarSeed(MAX_PATH_BYTES))?;
                        }
                        Key::NotebookPath => {
                            input.notebook_path =
                                map.next_value_seed(ScalarSeed(MAX_PATH_BYTES))?;
                        }
                        Key::Command => {
                            input.command = map.next_value_seed(ScalarSeed(MAX_COMMAND_BYTES))?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(input)
            }
        }
        d.deserialize_any(V)
    }
}
