//! SIGINT, SIGTERM and SIGHUP: noted instead of obeyed at once where dying would leave a mess.
//! - `up` notes them from the start ([`arm`]), so that it stops at the next step boundary and
//!   hands the lease back instead of dying half-way.
//! - Every command notes them while a restic of its runs ([`Shield`]) and passes them on to that
//!   restic as SIGINT: restic removes its repository lock on SIGINT (before 0.18, on SIGINT
//!   only), and it says so on the pipe ag-box reads, so with ag-box gone first, that write would
//!   kill it holding the lock. The command then stops as restic ends ([`check`]). restic runs in
//!   a process group of its own (`sys::restic`), so a terminal's Ctrl-C reaches ag-box alone.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use anyhow::Result;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::unistd::Pid;

use crate::error::UserError;

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

static CAUGHT: AtomicI32 = AtomicI32::new(0);
/// `up` noted signals from its start: a shield ending leaves that as it is.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Shields up now: the last one to go gives the signals their default back.
static SHIELDS: AtomicUsize = AtomicUsize::new(0);
/// The restic processes running under a shield (0: a free slot).
static RESTICS: [AtomicI32; 128] = [const { AtomicI32::new(0) }; 128];

extern "C" fn note(signal: nix::libc::c_int) {
    CAUGHT.store(signal, Ordering::SeqCst);
    for slot in &RESTICS {
        let pid = slot.load(Ordering::SeqCst);
        if pid > 0 {
            // kill(2) is async-signal-safe; a restic already gone is no matter.
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }
}

/// Which of [`SIGNALS`] ag-box was started with ignored (`nohup`, a script's `&`): they stay
/// ignored.
static IGNORED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];

fn set(signal: Signal, handler: SigHandler) -> Option<SigHandler> {
    let action = SigAction::new(handler, SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only touches atomics and calls kill(2).
    match unsafe { sigaction(signal, &action) } {
        Ok(old) => Some(old.handler()),
        Err(e) => {
            tracing::debug!("not catching {signal}: {e}");
            None
        }
    }
}

/// Notes [`SIGNALS`] from now on, but for those ag-box was started with ignored.
fn note_all() {
    for (signal, ignored) in SIGNALS.iter().zip(&IGNORED) {
        if set(*signal, SigHandler::Handler(note)) == Some(SigHandler::SigIgn) {
            ignored.store(true, Ordering::SeqCst);
            set(*signal, SigHandler::SigIgn);
        }
    }
}

/// From here on SIGINT, SIGTERM and SIGHUP are noted for [`check`] (unless ignored from the
/// start: `nohup ag-box up` goes on after a hangup).
pub(crate) fn arm() {
    ARMED.store(true, Ordering::SeqCst);
    if SHIELDS.load(Ordering::SeqCst) == 0 {
        note_all();
    }
}

/// Fails once a noted signal arrived, naming the step it stopped before.
pub(crate) fn check(step: &str) -> Result<()> {
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

/// While it lives, signals are noted (not obeyed) and passed on to the restic it was told of.
/// Made before the restic is started, so that no signal falls between the two.
pub(crate) struct Shield {
    slot: Option<usize>,
}

impl Shield {
    pub(crate) fn new() -> Shield {
        if SHIELDS.fetch_add(1, Ordering::SeqCst) == 0 && !ARMED.load(Ordering::SeqCst) {
            note_all();
        }
        Shield { slot: None }
    }

    /// The restic just started: a signal from here on reaches it too.
    pub(crate) fn forward_to(&mut self, pid: u32) {
        let Ok(pid) = i32::try_from(pid) else { return };
        // More at once than slots: those are not told (a unit's stop still reaches them).
        self.slot = RESTICS.iter().position(|s| {
            s.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
    }
}

impl Shield {
    /// Its restic has ended: signals are obeyed again, and one noted meanwhile stops the
    /// command here.
    pub(crate) fn end(self, step: &str) -> Result<()> {
        drop(self);
        check(step)
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            RESTICS[i].store(0, Ordering::SeqCst);
        }
        if SHIELDS.fetch_sub(1, Ordering::SeqCst) == 1 && !ARMED.load(Ordering::SeqCst) {
            for (signal, ignored) in SIGNALS.iter().zip(&IGNORED) {
                if !ignored.load(Ordering::SeqCst) {
                    set(*signal, SigHandler::SigDfl);
                }
            }
        }
    }
}
