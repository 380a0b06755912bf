//! Chat-template arguments: `--chat` / `--system` / `--chat-template` … for `kiln
//! generate`, and the template group `kiln chat` shares.

use std::path::PathBuf;

/// Which template, and what it is given besides the messages.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TemplateArgs {
    /// A system message.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// A Jinja file to use as the chat template instead of the model's own (needed for a
    /// model that has none).
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// Use the model's chat template of this name (e.g. `tool_use`) instead of the default.
    #[arg(long, value_name = "NAME")]
    pub chat_template_name: Option<String>,
    /// Tools the template may describe: a JSON file holding an array of function schemas.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// An extra template variable, `NAME=JSON` (repeatable), e.g. `enable_thinking=false`.
    #[arg(long = "chat-var", value_name = "NAME=JSON")]
    pub chat_vars: Vec<String>,
}

/// `kiln generate`'s chat options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ChatArgs {
    /// Treat the prompt as a user message and render it with the model's chat template
    /// (with --system, --tools, … below), ending with the assistant's header.
    #[arg(long)]
    pub chat: bool,
    /// Print the prompt text exactly as it will be tokenized (after the chat template) to
    /// stdout, then exit without generating.
    #[arg(long)]
    pub print_prompt: bool,
    #[command(flatten)]
    pub template: TemplateArgs,
}
