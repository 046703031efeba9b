//! Ctrl-C, `kill` and a dropped terminal during `up`: noted, not obeyed at once, so that `up`
//! stops at the next step boundary and hands the lease back instead of dying half-way.

use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::Result;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

use crate::error::UserError;

static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: nix::libc::c_int) {
    CAUGHT.store(signal, Ordering::SeqCst);
}

/// From here on SIGINT, SIGTERM and SIGHUP are noted for [`check`].
pub fn arm() {
    let action = SigAction::new(SigHandler::Handler(note), SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores into an atomic.
        if let Err(e) = unsafe { sigaction(signal, &action) } {
            tracing::debug!("not catching {signal}: {e}");
        }
    }
}

/// Fails once a noted signal arrived, naming the step it stopped before.
pub fn check(step: &str) -> Result<()> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => Ok(()),
        n => {
            let name = Signal::try_from(n).map_or_else(|_| n.to_string(), |s| s.to_string());
            Err(UserError::failed(
                format!("interrupted by {name} before {step}"),
                "run the command again when you are ready",
            )
            .into())
        }
    }
}
