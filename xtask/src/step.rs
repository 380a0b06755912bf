//! One step of a gate: a command run and timed, its failure a typed error naming the step.
//! A leaf, shared by `ci` and `aarch64`.

use std::process::Command;

use crate::XtaskError;

/// Runs one gate command and times it: a command that cannot start or exits non-zero
/// becomes `StepFailed { step }`; success prints "xtask ci: WHAT passed in N s".
pub(crate) fn run_step(
    step: &'static str,
    what: &str,
    cmd: &mut Command,
) -> Result<(), XtaskError> {
    let started = std::time::Instant::now();
    let status = cmd.status().map_err(|e| XtaskError::StepFailed {
        step,
        detail: format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()),
    })?;
    if !status.success() {
        return Err(XtaskError::StepFailed {
            step,
            detail: format!("{what} exited with {status}"),
        });
    }
    eprintln!(
        "xtask ci: {what} passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
