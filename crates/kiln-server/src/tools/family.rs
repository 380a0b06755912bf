//! Tool-call formats by chat-template family. The family is read from the template that
//! renders the conversation (the text it writes for a call), never guessed from a reply.

/// How a template's model writes a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Hermes / Qwen 2.5+: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`,
    /// one block per call.
    Hermes,
    /// Llama 3.x: a bare JSON object `{"name": …, "parameters": {…}}` (optionally after
    /// `<|python_tag|>`), several separated by `;`.
    Llama3,
    /// Mistral: `[TOOL_CALLS]` then a JSON array of `{"name": …, "arguments": {…}}`.
    Mistral,
    /// Templates that know no tools: Kiln describes the tools in a system message and asks
    /// for `{"tool_calls": [{"name": …, "arguments": {…}}]}`.
    Generic,
}

impl Family {
    /// The family of a template, from its source text.
    pub fn of_template(source: &str) -> Family {
        if source.contains("<tool_call>") {
            Family::Hermes
        } else if source.contains("[TOOL_CALLS]") {
            Family::Mistral
        } else if source.contains("<|python_tag|>")
            || (source.contains("ipython") && source.contains("\"parameters\""))
        {
            Family::Llama3
        } else {
            Family::Generic
        }
    }

    /// Whether the template itself describes `tools` to the model (else Kiln adds a
    /// system message).
    pub fn template_renders_tools(self) -> bool {
        self != Family::Generic
    }

    /// The key holding a call's arguments.
    pub fn arguments_key(self) -> &'static str {
        match self {
            Family::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// Text that starts a call; before it, the reply is ordinary content. `None`: a call is
    /// a JSON value at the very start of the reply.
    pub fn trigger(self) -> Option<&'static str> {
        match self {
            Family::Hermes => Some("<tool_call>"),
            Family::Mistral => Some("[TOOL_CALLS]"),
            Family::Llama3 | Family::Generic => None,
        }
    }

    /// Whether a reply may also be a call written as bare JSON at its start (Llama 3's
    /// syntax; Qwen2.5-Coder, a Hermes-template model, often drops its `<tool_call>` tags).
    pub fn may_start_bare(self) -> bool {
        self != Family::Mistral
    }

    /// Text put at the end of the prompt when a call is required, so the constrained reply
    /// starts inside the call (special tokens a grammar cannot produce stay in the prompt).
    pub fn forced_prefix(self) -> &'static str {
        match self {
            Family::Hermes => "<tool_call>\n",
            Family::Mistral => "[TOOL_CALLS]",
            Family::Llama3 | Family::Generic => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_read_from_the_templates_call_syntax() {
        assert_eq!(
            Family::of_template("{{- '<tool_call>\\n{\"name\": \"' }}"),
            Family::Hermes
        );
        assert_eq!(
            Family::of_template("{{ '[TOOL_CALLS] [' }}"),
            Family::Mistral
        );
        assert_eq!(
            Family::of_template("{{- '<|python_tag|>' }}{\"name\": ... \"parameters\""),
            Family::Llama3
        );
        assert_eq!(
            Family::of_template("{% for m in messages %}{{ m.content }}{% endfor %}"),
            Family::Generic
        );
    }
}
