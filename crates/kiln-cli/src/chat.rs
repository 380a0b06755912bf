//! Chat: the prompt of `kiln generate --chat` (the model's chat template around one user
//! message), and `kiln chat`, an interactive conversation that reads lines from stdin
//! (a terminal or a pipe), streams each reply, keeps the history within the context
//! window by dropping the oldest turns (never the system prompt), and says so plainly
//! when even a single message cannot fit. `--stop`, `--json-schema` and `--grammar` apply
//! to each reply on its own.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use clap::Args;
use kiln_format::Metadata;
use kiln_model::{Logits, Model, Session};
use kiln_sample::{Grammar, GrammarCache, Matcher, Sampler, StopStrings, Vocab};
use kiln_tokenizer::chat::{ChatTemplate, Conversation, RenderOptions, SpecialTokens};
use kiln_tokenizer::{HfTokenizerConfig, StreamDecoder, Tokenizer};

use crate::args::chat::{ChatArgs, TemplateArgs};
use crate::args::model::{Loaded, ModelArgs};
use crate::error::CliError;

/// The model's chat template, or the one `--chat-template` names.
pub fn load_template(
    args: &TemplateArgs,
    model_path: &Path,
    gguf: Option<&Metadata>,
    tok: &Tokenizer,
) -> Result<ChatTemplate, CliError> {
    let special = || -> Result<SpecialTokens, CliError> {
        Ok(match gguf {
            Some(_) => SpecialTokens::of(tok),
            None => SpecialTokens::from_hf_config(&HfTokenizerConfig::from_dir(model_path)?),
        })
    };
    if let Some(file) = &args.chat_template {
        let source = std::fs::read_to_string(file).map_err(|e| {
            CliError::Usage(format!(
                "cannot read the chat template {}: {e}",
                file.display()
            ))
        })?;
        return Ok(ChatTemplate::new(
            source,
            file.display().to_string(),
            special()?,
        )?);
    }
    let found = match gguf {
        Some(md) => ChatTemplate::from_gguf(md, tok)?,
        None => ChatTemplate::from_hf_dir(model_path)?,
    };
    found.ok_or_else(|| {
        let place = if gguf.is_some() {
            "its GGUF has no tokenizer.chat_template"
        } else {
            "its directory has no chat_template.jinja, chat_template.json or \
             tokenizer_config.json chat_template"
        };
        CliError::Usage(format!(
            "the model has no chat template ({place}); give one with --chat-template FILE"
        ))
    })
}

/// The system message, tools and variables of the template arguments.
fn base_conversation(args: &TemplateArgs) -> Result<Conversation, CliError> {
    let mut conv = Conversation::new();
    if let Some(system) = &args.system {
        conv.push("system", system);
    }
    if let Some(path) = &args.tools {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        conv.set_tools_json(&text)?;
    }
    for var in &args.chat_vars {
        let (name, value) = var
            .split_once('=')
            .ok_or_else(|| CliError::Usage(format!("--chat-var {var:?} is not NAME=JSON")))?;
        conv.set_var_json(name, value)?;
    }
    Ok(conv)
}

fn render_options(args: &TemplateArgs) -> RenderOptions {
    RenderOptions {
        add_generation_prompt: true,
        template_name: args.chat_template_name.clone(),
        now: None,
    }
}

/// The template of a loaded model: from its GGUF metadata, or from the directory
/// `--model` names.
fn template_of(
    args: &TemplateArgs,
    model: &Model,
    model_args: &ModelArgs,
    tok: &Tokenizer,
) -> Result<ChatTemplate, CliError> {
    let md = model.gguf().map(|f| f.metadata());
    let path = kiln_hub::resolve(&model_args.model)?;
    load_template(args, &path, md, tok)
}

/// The prompt ids of `kiln generate`: with `--chat`, the prompt as a user message in the
/// chat template; otherwise the prompt itself. `None` when `--print-prompt` printed the
/// prompt text and nothing is to be generated.
pub fn prompt_tokens(
    args: &ChatArgs,
    prompt: &str,
    tok: &Tokenizer,
    model: &Model,
    model_args: &ModelArgs,
) -> Result<Option<Vec<u32>>, CliError> {
    let t = &args.template;
    if !args.chat {
        if t.system.is_some()
            || t.chat_template.is_some()
            || t.chat_template_name.is_some()
            || t.tools.is_some()
            || !t.chat_vars.is_empty()
        {
            return Err(CliError::Usage(
                "--system, --chat-template, --chat-template-name, --tools and --chat-var need --chat"
                    .into(),
            ));
        }
        if args.print_prompt {
            print!("{prompt}");
            std::io::stdout().flush()?;
            return Ok(None);
        }
        return Ok(Some(tok.encode(prompt, true, true)?));
    }
    let template = template_of(t, model, model_args, tok)?;
    let mut conv = base_conversation(t)?;
    // A prompt piped on stdin ends with a newline the message does not mean.
    let message = prompt
        .strip_suffix('\n')
        .map(|p| p.strip_suffix('\r').unwrap_or(p))
        .unwrap_or(prompt);
    conv.push("user", message);
    let text = template.render(&conv, &render_options(t))?;
    if args.print_prompt {
        print!("{text}");
        std::io::stdout().flush()?;
        return Ok(None);
    }
    Ok(Some(template.prompt_tokens(tok, &text)?))
}

/// `kiln chat`.
#[derive(Args, Debug)]
pub struct ChatCommandArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    template: TemplateArgs,
    /// The most tokens of one reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    n_predict: usize,
    /// Context size in tokens: the conversation is kept within it (default: the training
    /// context, at most 4096).
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    /// Worker threads (default: all available cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    #[command(flatten)]
    sampling: crate::args::sampling::SamplingArgs,
}

/// Messages the REPL understands besides chat text.
const HELP: &str = "commands: /reset (forget the conversation, keep the system prompt), /exit";

pub fn run(args: ChatCommandArgs) -> Result<(), CliError> {
    let threads = crate::threads::count(args.threads)?;
    if args.n_predict == 0 {
        return Err(CliError::Usage("--n-predict must be at least 1".into()));
    }
    let pool = crate::threads::pool(threads)?;
    let Loaded { model, tokenizer } = args.model.load()?;
    let template = template_of(&args.template, &model, &args.model, &tokenizer)?;
    let n_ctx = args
        .ctx_size
        .unwrap_or(model.config().n_ctx_train.min(4096));
    if n_ctx < 2 {
        return Err(CliError::Usage("--ctx-size must be at least 2".into()));
    }
    let sampler_cfg = args.sampling.config(n_ctx)?;
    let stops = args.sampling.stop_strings()?;
    let grammar = args.sampling.grammar(&GrammarCache::new(1))?;
    let vocab = kiln_engine::sampler_vocab(&tokenizer);
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "kiln chat: {} ({} tokens of context; chat template from {}). {HELP}",
            args.model.model,
            n_ctx,
            template.origin()
        );
    }
    pool.install(|| {
        let mut chat = Chat {
            tok: &tokenizer,
            template: &template,
            opts: render_options(&args.template),
            conv: base_conversation(&args.template)?,
            session: Session::new(Arc::clone(&model), n_ctx, 512),
            evaluated: Vec::new(),
            sampler: Sampler::with_vocab(sampler_cfg, Arc::clone(&vocab)),
            stops,
            grammar,
            vocab,
            n_ctx,
            reserve: args.n_predict.min(n_ctx / 2).max(1),
            n_predict: args.n_predict,
        };
        let system_len = chat.conv.len();
        let stdin = std::io::stdin();
        let mut lines = stdin.lock();
        let mut line = String::new();
        loop {
            if interactive {
                eprint!("> ");
                std::io::stderr().flush()?;
            }
            line.clear();
            if lines.read_line(&mut line)? == 0 {
                break;
            }
            let message = line.trim_end_matches(['\n', '\r']);
            match message.trim() {
                "" => continue,
                "/exit" | "/quit" => break,
                "/reset" => {
                    chat.conv.truncate(system_len);
                    eprintln!("(conversation cleared)");
                    continue;
                }
                "/help" => {
                    eprintln!("{HELP}");
                    continue;
                }
                _ => {}
            }
            chat.turn(message, system_len)?;
        }
        Ok(())
    })
}

/// The state of a conversation.
struct Chat<'a> {
    tok: &'a Tokenizer,
    template: &'a ChatTemplate,
    opts: RenderOptions,
    conv: Conversation,
    session: Session,
    /// The ids whose keys and values the session holds, in order.
    evaluated: Vec<u32>,
    sampler: Sampler,
    /// `--stop`, reset for each reply.
    stops: StopStrings,
    /// `--json-schema` / `--grammar`: each reply starts a fresh match.
    grammar: Option<Arc<Grammar>>,
    vocab: Arc<Vocab>,
    n_ctx: usize,
    /// Context kept free for the reply when fitting the history.
    reserve: usize,
    n_predict: usize,
}

impl Chat<'_> {
    /// One user message and the streamed reply.
    fn turn(&mut self, message: &str, system_len: usize) -> Result<(), CliError> {
        self.conv.push("user", message);
        let Some(prompt) = self.fit(system_len)? else {
            return Ok(());
        };
        // Keep what the session already holds of this prompt; evaluate the rest.
        let mut keep = self
            .evaluated
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if keep == prompt.len() {
            keep -= 1; // the last prompt token must run again for its logits
        }
        self.session.truncate(keep);
        self.evaluated.truncate(keep);
        for &t in &prompt[keep..] {
            self.sampler.accept(t);
        }
        let mut logits = self.session.forward(&prompt[keep..], Logits::Last)?;
        self.evaluated.extend_from_slice(&prompt[keep..]);

        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut decoder = StreamDecoder::continuing(self.tok);
        if let Some(g) = &self.grammar {
            let matcher = Matcher::new(Arc::clone(g), Arc::clone(&self.vocab))?;
            self.sampler.set_grammar(matcher);
        }
        self.stops.reset();
        let mut reply = String::new();
        let mut emit = String::new();
        let mut stopped = false;
        let mut cut = None;
        for generated in 0.. {
            if generated == self.n_predict {
                cut = Some(format!("the reply reached --n-predict {}", self.n_predict));
                break;
            }
            let id = self.sampler.try_sample(logits)?;
            if self.tok.is_eog(id) {
                break;
            }
            emit.clear();
            stopped = self.stops.push(&decoder.push(id), &mut emit).is_some();
            out.write_all(emit.as_bytes())?;
            out.flush()?;
            reply.push_str(&emit);
            if stopped {
                break;
            }
            self.sampler.accept(id);
            if self.evaluated.len() >= self.n_ctx {
                cut = Some(format!("the context of {} tokens is full", self.n_ctx));
                break;
            }
            logits = self.session.forward(&[id], Logits::Last)?;
            self.evaluated.push(id);
        }
        let mut tail = String::new();
        if !stopped {
            self.stops.push(&decoder.finish(), &mut tail);
            self.stops.finish(&mut tail);
        }
        out.write_all(tail.as_bytes())?;
        reply.push_str(&tail);
        writeln!(out)?;
        out.flush()?;
        if let Some(why) = cut {
            eprintln!("(reply cut: {why})");
        }
        self.conv.push("assistant", &reply);
        Ok(())
    }

    /// Renders the conversation for the next reply, dropping the oldest turns (never the
    /// system messages at `..system_len`) until it fits the context with room for the
    /// reply. `None`, after saying why, when the newest message cannot fit even alone.
    fn fit(&mut self, system_len: usize) -> Result<Option<Vec<u32>>, CliError> {
        let mut dropped = 0;
        loop {
            let text = self.template.render(&self.conv, &self.opts)?;
            let ids = self.template.prompt_tokens(self.tok, &text)?;
            if ids.len() + self.reserve <= self.n_ctx {
                if dropped > 0 {
                    eprintln!(
                        "(dropped the {dropped} oldest message{} to stay within the context of {} tokens)",
                        if dropped == 1 { "" } else { "s" },
                        self.n_ctx
                    );
                }
                return Ok(Some(ids));
            }
            // Older turns to drop: everything between the system prompt and the new message.
            if self.conv.len() > system_len + 1 {
                self.conv.remove(system_len);
                dropped += 1;
                // Start the kept history at a user message, as templates expect.
                while self.conv.len() > system_len + 1
                    && self.conv.role(system_len).as_deref() != Some("user")
                {
                    self.conv.remove(system_len);
                    dropped += 1;
                }
                continue;
            }
            let last = self.conv.len() - 1;
            self.conv.remove(last);
            eprintln!(
                "error: this message does not fit: with the chat template{} it takes {} tokens, \
                 and the context holds {} with {} kept for the reply. It was not sent; use a \
                 larger --ctx-size or a shorter message.",
                if system_len > 0 {
                    " and the system prompt"
                } else {
                    ""
                },
                ids.len(),
                self.n_ctx,
                self.reserve
            );
            return Ok(None);
        }
    }
}
