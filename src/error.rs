//! Errors whose exit code matters to the caller (scripts, timers, remote `up`).

use std::fmt;

/// Exit codes of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Failure = 1,
    Usage = 2,
    LeaseHeld = 3,
    ToolMissing = 4,
}

/// An error meant for the operator: one line naming the thing, then a hint.
#[derive(Debug, thiserror::Error)]
pub struct UserError {
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
    pub fn new(code: Code, message: impl Into<String>, hint: impl Into<String>) -> Self {
        UserError {
            code,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Code::Usage, message, hint)
    }
    pub fn failed(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Code::Failure, message, hint)
    }
    pub fn tool_missing(tool: &str) -> Self {
        let package = match tool {
            "bwrap" => "bubblewrap",
            "nsenter" => "util-linux",
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

/// The exit status of a child whose code `exec`/`attach` pass through.
#[derive(Debug, thiserror::Error)]
#[error("command exited with status {0}")]
pub struct ChildExit(pub i32);
