//! A parser for GBNF, the grammar notation of llama.cpp:
//!
//! ```text
//! root   ::= object
//! object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//! pair   ::= string ":" ws value      # comments run to the end of the line
//! digit  ::= [0-9]   nondq ::= [^"\\]   any ::= .
//! repeat ::= x* x+ x? x{3} x{2,} x{2,5}
//! ```
//!
//! Literals and classes hold Unicode characters; escapes are `\n \r \t \\ \" \] \[ \-`
//! and `\xHH`, `\uHHHH`, `\UHHHHHHHH` (code points). A rule ends where the next
//! `name ::=` begins, so alternatives may span lines.

use super::GrammarError;
use super::ir::{Expr, Ir};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Define,
    Literal(Vec<u8>),
    Class(Vec<(u32, u32)>, bool),
    Dot,
    LParen,
    RParen,
    Pipe,
    Star,
    Plus,
    Question,
    Braces(u32, Option<u32>),
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl<'a> Lexer<'a> {
    fn error(&self, at: usize, message: impl Into<String>) -> GrammarError {
        let before = &self.src[..at.min(self.src.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        GrammarError::Syntax {
            line,
            column,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self) {
        while let Some(c) = self.peek() {
            if c == '#' {
                while let Some(c) = self.bump() {
                    if c == '\n' {
                        break;
                    }
                }
            } else if c.is_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn hex(&mut self, n: usize, at: usize) -> Result<u32, GrammarError> {
        let mut v = 0u32;
        for _ in 0..n {
            let d = self
                .bump()
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.error(at, format!("expected {n} hex digits")))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// One (possibly escaped) character of a literal or class.
    fn char_value(&mut self) -> Result<u32, GrammarError> {
        let at = self.pos;
        let c = self
            .bump()
            .ok_or_else(|| self.error(at, "unexpected end of input"))?;
        if c != '\\' {
            return Ok(c as u32);
        }
        let e = self
            .bump()
            .ok_or_else(|| self.error(at, "unexpected end of input after `\\`"))?;
        Ok(match e {
            'n' => '\n' as u32,
            'r' => '\r' as u32,
            't' => '\t' as u32,
            'x' => self.hex(2, at)?,
            'u' => self.hex(4, at)?,
            'U' => self.hex(8, at)?,
            '\\' | '"' | '[' | ']' | '-' | '^' | '\'' => e as u32,
            other => return Err(self.error(at, format!("unknown escape `\\{other}`"))),
        })
    }

    fn number(&mut self) -> Result<u32, GrammarError> {
        let at = self.pos;
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        self.src[start..self.pos]
            .parse()
            .map_err(|_| self.error(at, "expected a number"))
    }

    fn next(&mut self) -> Result<Option<(usize, Tok)>, GrammarError> {
        self.skip_space();
        let at = self.pos;
        let Some(c) = self.peek() else {
            return Ok(None);
        };
        let tok = match c {
            '"' => {
                self.bump();
                let mut bytes = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(self.error(at, "unterminated literal")),
                        Some('"') => {
                            self.bump();
                            break;
                        }
                        Some(_) => {
                            let v = self.char_value()?;
                            let ch = char::from_u32(v).ok_or_else(|| {
                                self.error(at, format!("{v:#x} is not a Unicode scalar value"))
                            })?;
                            let mut buf = [0u8; 4];
                            bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                Tok::Literal(bytes)
            }
            '[' => {
                self.bump();
                let negated = self.peek() == Some('^');
                if negated {
                    self.bump();
                }
                let mut ranges = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(self.error(at, "unterminated character class")),
                        Some(']') => {
                            self.bump();
                            break;
                        }
                        Some(_) => {
                            let lo = self.char_value()?;
                            let mut hi = lo;
                            if self.peek() == Some('-')
                                && !self.src[self.pos + 1..].starts_with(']')
                            {
                                self.bump();
                                hi = self.char_value()?;
                            }
                            if hi < lo {
                                return Err(self.error(at, "character range is reversed"));
                            }
                            ranges.push((lo, hi));
                        }
                    }
                }
                Tok::Class(ranges, negated)
            }
            '.' => {
                self.bump();
                Tok::Dot
            }
            '(' => {
                self.bump();
                Tok::LParen
            }
            ')' => {
                self.bump();
                Tok::RParen
            }
            '|' => {
                self.bump();
                Tok::Pipe
            }
            '*' => {
                self.bump();
                Tok::Star
            }
            '+' => {
                self.bump();
                Tok::Plus
            }
            '?' => {
                self.bump();
                Tok::Question
            }
            '{' => {
                self.bump();
                self.skip_space();
                let min = self.number()?;
                self.skip_space();
                let max = if self.peek() == Some(',') {
                    self.bump();
                    self.skip_space();
                    if self.peek() == Some('}') {
                        None
                    } else {
                        Some(self.number()?)
                    }
                } else {
                    Some(min)
                };
                self.skip_space();
                if self.bump() != Some('}') {
                    return Err(self.error(at, "expected `}` to close a repetition"));
                }
                Tok::Braces(min, max)
            }
            ':' if self.src[self.pos..].starts_with("::=") => {
                self.pos += 3;
                Tok::Define
            }
            c if is_name_char(c) => {
                let start = self.pos;
                while self.peek().is_some_and(is_name_char) {
                    self.bump();
                }
                Tok::Name(self.src[start..self.pos].to_string())
            }
            other => return Err(self.error(at, format!("unexpected character `{other}`"))),
        };
        Ok(Some((at, tok)))
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    toks: Vec<(usize, Tok)>,
    i: usize,
    ir: Ir,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|t| &t.1)
    }

    fn at(&self) -> usize {
        self.toks.get(self.i).map_or(self.lexer.src.len(), |t| t.0)
    }

    fn error(&self, message: impl Into<String>) -> GrammarError {
        self.lexer.error(self.at(), message)
    }

    /// A name followed by `::=` starts the next rule.
    fn at_rule_start(&self) -> bool {
        matches!(self.peek(), Some(Tok::Name(_)))
            && matches!(self.toks.get(self.i + 1), Some((_, Tok::Define)))
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let Some(Tok::Name(name)) = self.peek().cloned() else {
            return Err(self.error("expected a rule name"));
        };
        self.i += 1;
        if self.peek() != Some(&Tok::Define) {
            return Err(self.error("expected `::=` after the rule name"));
        }
        self.i += 1;
        let body = self.alternatives(0)?;
        let id = self.ir.rule(&name);
        self.ir.define(id, body)
    }

    fn alternatives(&mut self, depth: usize) -> Result<Expr, GrammarError> {
        if depth > 256 {
            return Err(self.error("groups nested too deeply"));
        }
        let mut alts = vec![self.sequence(depth)?];
        while self.peek() == Some(&Tok::Pipe) {
            self.i += 1;
            alts.push(self.sequence(depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Expr::Empty)
        } else {
            Expr::Alt(alts)
        })
    }

    fn sequence(&mut self, depth: usize) -> Result<Expr, GrammarError> {
        let mut items = Vec::new();
        loop {
            if self.at_rule_start() {
                break;
            }
            let mut e = match self.peek().cloned() {
                Some(Tok::Literal(b)) => {
                    self.i += 1;
                    Expr::Literal(b)
                }
                Some(Tok::Class(ranges, negated)) => {
                    self.i += 1;
                    Expr::Class { ranges, negated }
                }
                Some(Tok::Dot) => {
                    self.i += 1;
                    Expr::Class {
                        ranges: Vec::new(),
                        negated: true,
                    }
                }
                Some(Tok::Name(n)) => {
                    self.i += 1;
                    Expr::Rule(self.ir.rule(&n))
                }
                Some(Tok::LParen) => {
                    self.i += 1;
                    let inner = self.alternatives(depth + 1)?;
                    if self.peek() != Some(&Tok::RParen) {
                        return Err(self.error("expected `)`"));
                    }
                    self.i += 1;
                    inner
                }
                _ => break,
            };
            loop {
                e = match self.peek() {
                    Some(Tok::Star) => Expr::star(e),
                    Some(Tok::Plus) => Expr::repeat(e, 1, None),
                    Some(Tok::Question) => Expr::opt(e),
                    Some(&Tok::Braces(min, max)) => Expr::repeat(e, min, max),
                    _ => break,
                };
                self.i += 1;
            }
            items.push(e);
        }
        Ok(match items.len() {
            0 => Expr::Empty,
            1 => items.pop().unwrap_or(Expr::Empty),
            _ => Expr::Seq(items),
        })
    }
}

/// Parses GBNF text into rules rooted at `root`.
pub(crate) fn parse(src: &str) -> Result<Ir, GrammarError> {
    let mut lexer = Lexer { src, pos: 0 };
    let mut toks = Vec::new();
    while let Some(t) = lexer.next()? {
        toks.push(t);
    }
    let mut p = Parser {
        lexer,
        toks,
        i: 0,
        ir: Ir::default(),
    };
    while p.i < p.toks.len() {
        p.rule()?;
    }
    match p.ir.names.iter().position(|n| n == "root") {
        Some(root) => p.ir.root = root as u32,
        None => return Err(GrammarError::MissingRoot),
    }
    if p.ir.bodies[p.ir.root as usize].is_none() {
        return Err(GrammarError::MissingRoot);
    }
    Ok(p.ir)
}
