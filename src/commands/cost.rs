//! `cost [<box>] [--since <time>] [--json]`: the tokens each box's agents used on this node, by
//! model, and an estimate of their cost, from the transcripts in the boxes' agent homes.

use std::time::SystemTime;

use anyhow::Result;
use serde::Serialize;

use super::JSON_SCHEMA_VERSION;
use crate::config::Config;
use crate::error::UserError;
use crate::plan::cost::{self, BoxCost, Sum, Tally};
use crate::plan::names::BoxName;
use crate::plan::{agent_home, prices};
use crate::sys::transcripts;

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    node: &'a str,
    since: Option<String>,
    prices_as_of: &'static str,
    boxes: &'a [BoxCost],
    total: Sum,
}

pub(crate) fn run(name: Option<&BoxName>, since: Option<&str>, json: bool) -> Result<()> {
    let config = Config::load()?;
    // The operator's "2h" counts back from now.
    let since = since
        .map(|s| cost::since(s, SystemTime::now()))
        .transpose()?;
    let homes = config.state_dir.join("homes");
    let names = match name {
        Some(n) => {
            if !agent_home::root_for(&config.state_dir, n).is_dir() {
                return Err(UserError::failed(
                    format!("box '{n}' has no agent home on this node"),
                    "its transcripts are on the node it last ran on: run 'ag-box cost' there",
                )
                .into());
            }
            vec![n.clone()]
        }
        None => transcripts::boxes_here(&homes)?,
    };
    let mut boxes = Vec::new();
    for n in &names {
        let mut tally = Tally::new(since);
        let root = agent_home::root_for(&config.state_dir, n);
        let warnings = match transcripts::read(n, &root, transcripts::LIMITS, &mut |e| {
            tally.add(e);
        }) {
            Ok(w) => w,
            Err(e) => vec![format!("box '{n}': not read: {e:#}")],
        };
        for w in &warnings {
            tracing::warn!("{w}");
        }
        boxes.push(cost::box_cost(n, &tally, warnings));
    }
    let total = cost::total(&boxes);
    if json {
        return super::print_json(&Report {
            schema_version: JSON_SCHEMA_VERSION,
            node: &config.node,
            since: since.map(cost::shown_time),
            prices_as_of: prices::AS_OF,
            boxes: &boxes,
            total,
        });
    }
    if boxes.is_empty() {
        say!("no box has an agent home on this node");
        return Ok(());
    }
    for line in cost::table(&boxes, &total) {
        out!("{line}");
    }
    say!(
        "tokens from the transcripts on this node{}; cost estimated at the prices of {} (docs/reference.md)",
        since
            .map(|t| format!(" since {}", cost::shown_time(t)))
            .unwrap_or_default(),
        prices::AS_OF
    );
    Ok(())
}
