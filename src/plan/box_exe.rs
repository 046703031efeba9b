//! Where the ag-box binary is inside every box: the agent window, the agents' hooks and the
//! terminal monitor run its hidden verbs there.

pub(crate) const BOX_EXE: &str = "/run/ag-box";
