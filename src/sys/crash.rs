//! Crash points for the fault tests. Built with the `crash-points` feature,
//! `AG_BOX_CRASH_AT=<point>` makes the process abort at that point, as a kill -9 or a power cut
//! would: no destructor, no cleanup, no hand-back. Without the feature, points cost nothing.

#[cfg(feature = "crash-points")]
pub fn point(name: &str) {
    if std::env::var("AG_BOX_CRASH_AT").is_ok_and(|v| v == name) {
        eprintln!("ag-box: crash point {name}");
        std::process::abort();
    }
}

#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn point(_name: &str) {}
