//! The grammar's intermediate form: named rules over byte literals, Unicode character
//! classes, rule references, sequences, alternatives and bounded repetition. Both front ends
//! (the GBNF parser and the JSON-schema compiler) produce it; [`super::nfa`] compiles it.

use super::GrammarError;

pub(crate) type RuleId = u32;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    /// Matches the empty string.
    Empty,
    /// These exact bytes.
    Literal(Vec<u8>),
    /// One Unicode scalar value in (or, negated, outside) these inclusive ranges.
    Class {
        ranges: Vec<(u32, u32)>,
        negated: bool,
    },
    Rule(RuleId),
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    /// `min..=max` repetitions (`max: None` is unbounded).
    Repeat {
        expr: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
}

impl Expr {
    pub(crate) fn lit(s: &str) -> Expr {
        Expr::Literal(s.as_bytes().to_vec())
    }

    pub(crate) fn class(ranges: &[(char, char)], negated: bool) -> Expr {
        Expr::Class {
            ranges: ranges.iter().map(|&(a, b)| (a as u32, b as u32)).collect(),
            negated,
        }
    }

    pub(crate) fn opt(e: Expr) -> Expr {
        Expr::Repeat {
            expr: Box::new(e),
            min: 0,
            max: Some(1),
        }
    }

    pub(crate) fn star(e: Expr) -> Expr {
        Expr::Repeat {
            expr: Box::new(e),
            min: 0,
            max: None,
        }
    }

    pub(crate) fn repeat(e: Expr, min: u32, max: Option<u32>) -> Expr {
        Expr::Repeat {
            expr: Box::new(e),
            min,
            max,
        }
    }
}

/// Rules by id; `root` is where matching starts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ir {
    pub names: Vec<String>,
    pub bodies: Vec<Option<Expr>>,
    pub root: RuleId,
}

impl Ir {
    /// The id of the rule called `name`, declaring it if it is new.
    pub(crate) fn rule(&mut self, name: &str) -> RuleId {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i as RuleId;
        }
        self.names.push(name.to_string());
        self.bodies.push(None);
        (self.names.len() - 1) as RuleId
    }

    /// A new rule with a name derived from `base` that no other rule has.
    pub(crate) fn fresh(&mut self, base: &str) -> RuleId {
        let mut name = base.to_string();
        let mut n = 1;
        while self.names.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        self.rule(&name)
    }

    pub(crate) fn define(&mut self, id: RuleId, body: Expr) -> Result<(), GrammarError> {
        let slot = &mut self.bodies[id as usize];
        if slot.is_some() {
            return Err(GrammarError::DuplicateRule {
                rule: self.names[id as usize].clone(),
            });
        }
        *slot = Some(body);
        Ok(())
    }

    /// Every referenced rule must have a body.
    pub(crate) fn check_defined(&self) -> Result<(), GrammarError> {
        match self.bodies.iter().position(Option::is_none) {
            Some(i) => Err(GrammarError::UndefinedRule {
                rule: self.names[i].clone(),
            }),
            None => Ok(()),
        }
    }
}
