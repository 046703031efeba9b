//! Errors whose exit code matters to the caller (scripts, timers, remote `up`).

use std::fmt;

/// Exit codes (docs/reference.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Failure = 1,
    Usage = 2,
    LeaseHeld = 3,
    ToolMissing = 4,
}

/// An error meant for the operator: one line naming the thing, then a hint.
#[derive(Debug, thiserror::Error)]
pub(crate) struct UserError {
    pub code: Code,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hint {
            Some(h) => write!(f, "{}; hint: {}", self.message, h),
            None => f.write_str(&self.message),
        }
    }
}

impl UserError {
    pub(crate) fn new(code: Code, message: impl Into<String>, hint: impl Into<String>) -> Self {
        UserError {
            code,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
    pub(crate) fn usage(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Code::Usage, message, hint)
    }
    pub(crate) fn failed(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Code::Failure, message, hint)
    }
    pub(crate) fn tool_missing(tool: &str) -> Self {
        let package = match tool {
            "bwrap" => "bubblewrap",
            "nsenter" | "unshare" => "util-linux",
            "ip" => "iproute2",
            "systemd-run" | "systemctl" => "systemd",
            "ssh" => "openssh-client",
            other => other,
        };
        Self::new(
            Code::ToolMissing,
            format!("required tool '{tool}' not found on PATH"),
            format!("install it, e.g. 'apt-get install {package}'"),
        )
    }
}

/// The line an error is reported as, and the exit code: every context of the chain, outermost
/// first; the hint and the code of the innermost user error (the one that knows what went wrong).
pub(crate) fn report(e: &anyhow::Error) -> (String, Code) {
    let innermost = e
        .chain()
        .filter_map(|c| c.downcast_ref::<UserError>())
        .last();
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = match cause.downcast_ref::<UserError>() {
            Some(u) => u.message.clone(),
            None => cause.to_string(),
        };
        if parts.last() != Some(&text) {
            parts.push(text);
        }
    }
    let mut line = parts.join(": ");
    if let Some(hint) = innermost.and_then(|u| u.hint.as_deref()) {
        line.push_str("; hint: ");
        line.push_str(hint);
    }
    (line, innermost.map_or(Code::Failure, |u| u.code))
}

/// The exit status of a child whose code `exec`/`attach` pass through.
#[derive(Debug, thiserror::Error)]
#[error("command exited with status {0}")]
pub(crate) struct ChildExit(pub i32);

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_whole_chain_with_the_innermost_hint_and_code() {
        let inner: anyhow::Result<()> =
            Err(UserError::new(Code::LeaseHeld, "S3 put failed", "check the network").into());
        let e = inner
            .context("box 'x' is stopped, but its final snapshot failed")
            .unwrap_err();
        assert_eq!(
            report(&e),
            (
                "box 'x' is stopped, but its final snapshot failed: S3 put failed; hint: check the network"
                    .to_string(),
                Code::LeaseHeld
            )
        );
        let deeper = Err::<(), anyhow::Error>(UserError::usage("bad thing", "do this").into())
            .context("step two")
            .context("step one")
            .unwrap_err();
        assert_eq!(
            report(&deeper),
            (
                "step one: step two: bad thing; hint: do this".to_string(),
                Code::Usage
            )
        );
        assert_eq!(
            report(&anyhow::anyhow!("plain")),
            ("plain".to_string(), Code::Failure)
        );
    }
}
