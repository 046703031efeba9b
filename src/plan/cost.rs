//! `ag-box cost`: the tokens a box's agents used, by model, and what they cost, from the lines
//! of the transcripts its agent home carries (docs/reference.md "cost"). Pure: the lines come
//! from `sys::transcripts`, the prices from [`super::prices`].
//!
//! - Claude Code writes one line per content block of a response, each with the response's
//!   whole `message.usage`: a response counts once, by its `requestId` (else `message.id`), in
//!   whichever file of the box it is found (a subagent's, a resumed or forked session's).
//! - Codex writes `event_msg` lines of type `token_count` whose `total_token_usage` is the
//!   session's running sum (continued by a resume, repeated when only rate limits changed): each
//!   counts what it adds to the one before; `last_token_usage` when the sum went back. Its
//!   `input_tokens` hold the cached ones, so input here is the uncached part, as Claude's is.
//!   The model is the one the latest `turn_context` line names.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;

use super::prices::{self, Price};
use super::text::escaped;
use crate::error::UserError;

/// The tokens of one response, or a sum of them, as they are billed: input apart from what
/// the prompt cache wrote and read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

impl Usage {
    fn add(&mut self, o: &Usage) {
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.cache_write = self.cache_write.saturating_add(o.cache_write);
        self.cache_read = self.cache_read.saturating_add(o.cache_read);
    }

    fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// In 10^-12 dollars (tokens times micro-dollars per million tokens): exact.
    fn cost(&self, p: &Price) -> u128 {
        u128::from(self.input) * u128::from(p.input)
            + u128::from(self.output) * u128::from(p.output)
            + u128::from(self.cache_write) * u128::from(p.cache_write)
            + u128::from(self.cache_read) * u128::from(p.cache_read)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Agent {
    ClaudeCode,
    Codex,
}

impl Agent {
    fn label(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
        }
    }
}

/// One response's usage, as a transcript line records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub agent: Agent,
    pub model: String,
    pub time: Option<SystemTime>,
    /// What tells the lines of one response apart from another's (Claude Code's `requestId`).
    pub request: Option<String>,
    pub usage: Usage,
}

/// The most of a model's name kept (a box writes what it likes there).
pub(crate) const MODEL_MAX: usize = 100;
/// The most models one box's rows name; the rest are summed as [`OTHER_MODELS`].
pub(crate) const MODELS_MAX: usize = 50;
pub(crate) const OTHER_MODELS: &str = "(other models)";
/// The longest request id remembered to count a response once (a longer one is not an id).
const REQUEST_MAX: usize = 200;

fn model_of(v: Option<&Value>) -> String {
    match v.and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.chars().take(MODEL_MAX).collect(),
        _ => "unknown".into(),
    }
}

fn number(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn time_of(v: &Value) -> Option<SystemTime> {
    v.get("timestamp")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// The response a Claude Code transcript line records, if it records one (an assistant line
/// with `message.usage`). Anything else, malformed lines included, is None.
pub(crate) fn claude_line(line: &str) -> Option<Entry> {
    // Most lines are prompts, tool output and file snapshots: not parsed.
    if !line.contains("\"usage\"") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v.get("type").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let message = v.get("message")?;
    let usage = message.get("usage").filter(|u| u.is_object())?;
    let request = v
        .get("requestId")
        .and_then(Value::as_str)
        .or_else(|| message.get("id").and_then(Value::as_str))
        .filter(|r| !r.is_empty() && r.len() <= REQUEST_MAX)
        .map(str::to_string);
    Some(Entry {
        agent: Agent::ClaudeCode,
        model: model_of(message.get("model")),
        time: time_of(&v),
        request,
        usage: Usage {
            input: number(usage, "input_tokens"),
            output: number(usage, "output_tokens"),
            cache_write: number(usage, "cache_creation_input_tokens"),
            cache_read: number(usage, "cache_read_input_tokens"),
        },
    })
}

/// Codex's counts as it writes them: input holds the cached part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CodexCounts {
    input: u64,
    cached: u64,
    cache_write: u64,
    output: u64,
}

impl CodexCounts {
    fn of(v: &Value) -> Option<CodexCounts> {
        v.is_object().then(|| CodexCounts {
            input: number(v, "input_tokens"),
            cached: number(v, "cached_input_tokens"),
            cache_write: number(v, "cache_write_input_tokens"),
            output: number(v, "output_tokens"),
        })
    }

    /// What `self` adds to `before`, when it is no less in any count.
    fn after(self, before: CodexCounts) -> Option<CodexCounts> {
        Some(CodexCounts {
            input: self.input.checked_sub(before.input)?,
            cached: self.cached.checked_sub(before.cached)?,
            cache_write: self.cache_write.checked_sub(before.cache_write)?,
            output: self.output.checked_sub(before.output)?,
        })
    }

    fn usage(self) -> Usage {
        Usage {
            input: self
                .input
                .saturating_sub(self.cached)
                .saturating_sub(self.cache_write),
            output: self.output,
            cache_write: self.cache_write,
            cache_read: self.cached,
        }
    }
}

/// One Codex rollout file, read line by line in order.
#[derive(Debug, Default)]
pub(crate) struct CodexRollout {
    model: Option<String>,
    total: Option<CodexCounts>,
}

impl CodexRollout {
    /// The usage this line adds, if it is a `token_count` event that adds any; a
    /// `turn_context` line sets the model of those after it.
    pub(crate) fn line(&mut self, line: &str) -> Option<Entry> {
        if !(line.contains("\"token_count\"") || line.contains("\"turn_context\"")) {
            return None;
        }
        let v: Value = serde_json::from_str(line).ok()?;
        let payload = v.get("payload")?;
        match v.get("type").and_then(Value::as_str)? {
            "turn_context" => {
                if payload.get("model").and_then(Value::as_str).is_some() {
                    self.model = Some(model_of(payload.get("model")));
                }
                None
            }
            "event_msg" if payload.get("type").and_then(Value::as_str) == Some("token_count") => {
                let info = payload.get("info")?;
                let total = info.get("total_token_usage").and_then(CodexCounts::of);
                let last = info.get("last_token_usage").and_then(CodexCounts::of);
                let added = match (total, self.total) {
                    (Some(t), Some(before)) if t == before => None,
                    (Some(t), Some(before)) => t.after(before).or(last).or(Some(t)),
                    (Some(t), None) => Some(t),
                    (None, _) => last,
                };
                if total.is_some() {
                    self.total = total;
                }
                let usage = added?.usage();
                Some(Entry {
                    agent: Agent::Codex,
                    model: self.model.clone().unwrap_or_else(|| "unknown".into()),
                    time: time_of(&v),
                    request: None,
                    usage,
                })
            }
            _ => None,
        }
    }
}

/// The responses counted, and their tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    pub requests: u64,
    pub usage: Usage,
}

/// What one box's transcripts add up to, by agent and model.
/// Does this response count (once): usage of its own, a request not counted before?
fn counts(seen: &mut HashSet<String>, e: &Entry) -> bool {
    !e.usage.is_zero() && e.request.as_ref().is_none_or(|r| seen.insert(r.clone()))
}

/// The tokens (in, out, cache write and read together) of the responses written in each span
/// between a box's snapshots: `ends` ascending, the first span from the beginning; what came
/// after the last end, or has no time, is in none.
#[derive(Debug)]
pub(crate) struct Intervals {
    ends: Vec<SystemTime>,
    seen: HashSet<String>,
    tokens: Vec<u64>,
}

impl Intervals {
    pub(crate) fn new(mut ends: Vec<SystemTime>) -> Intervals {
        ends.sort();
        let tokens = vec![0; ends.len()];
        Intervals {
            ends,
            seen: HashSet::new(),
            tokens,
        }
    }

    pub(crate) fn add(&mut self, e: &Entry) {
        let Some(t) = e.time else {
            return;
        };
        let at = self.ends.partition_point(|end| *end < t);
        if at == self.ends.len() || !counts(&mut self.seen, e) {
            return;
        }
        let u = &e.usage;
        self.tokens[at] = [u.input, u.output, u.cache_write, u.cache_read]
            .iter()
            .fold(self.tokens[at], |sum, n| sum.saturating_add(*n));
    }

    /// The tokens of the span that ends at `end` (one of the ends given).
    pub(crate) fn tokens_until(&self, end: SystemTime) -> Option<u64> {
        self.ends.binary_search(&end).ok().map(|i| self.tokens[i])
    }
}

#[derive(Debug, Default)]
pub(crate) struct Tally {
    since: Option<SystemTime>,
    seen: HashSet<String>,
    rows: BTreeMap<(Agent, String), Counted>,
}

impl Tally {
    /// Counting only what was written at `since` or later (a line without a time then is not).
    pub(crate) fn new(since: Option<SystemTime>) -> Tally {
        Tally {
            since,
            ..Tally::default()
        }
    }

    pub(crate) fn add(&mut self, e: Entry) {
        if let Some(since) = self.since
            && e.time.is_none_or(|t| t < since)
        {
            return;
        }
        if !counts(&mut self.seen, &e) {
            return;
        }
        let mut key = (e.agent, e.model);
        if !self.rows.contains_key(&key) && self.rows.len() >= MODELS_MAX {
            key.1 = OTHER_MODELS.into();
        }
        let row = self.rows.entry(key).or_default();
        row.requests += 1;
        row.usage.add(&e.usage);
    }

    pub(crate) fn rows(&self) -> &BTreeMap<(Agent, String), Counted> {
        &self.rows
    }
}

/// One box's tokens of one model, and their cost (None: a model with no price).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ModelCost {
    pub agent: Agent,
    pub model: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: Option<f64>,
}

/// A sum of rows: its cost is that of the priced ones, `unpriced_models` the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Sum {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
    pub unpriced_models: Vec<String>,
    #[serde(skip)]
    picodollars: u128,
}

impl Sum {
    fn add(&mut self, requests: u64, u: &Usage, cost: Option<u128>, model: &str) {
        self.requests += requests;
        self.input_tokens = self.input_tokens.saturating_add(u.input);
        self.output_tokens = self.output_tokens.saturating_add(u.output);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(u.cache_write);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(u.cache_read);
        match cost {
            Some(c) => self.picodollars += c,
            None => {
                if !self.unpriced_models.iter().any(|m| m == model) {
                    self.unpriced_models.push(model.to_string());
                }
            }
        }
        self.cost_usd = dollars(self.picodollars);
    }
}

/// 10^-12 dollars as dollars, to the micro-dollar.
#[allow(
    clippy::cast_precision_loss,
    reason = "a micro-dollar count far below 2^52"
)]
fn dollars(picodollars: u128) -> f64 {
    let micro = (picodollars + 500_000) / 1_000_000;
    micro as f64 / 1_000_000.0
}

/// One box: its rows, their sum, and what its reading could not count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BoxCost {
    #[serde(rename = "box")]
    pub name: String,
    pub models: Vec<ModelCost>,
    pub total: Sum,
    pub warnings: Vec<String>,
}

pub(crate) fn box_cost(name: &str, tally: &Tally, warnings: Vec<String>) -> BoxCost {
    let mut total = Sum::default();
    let models = tally
        .rows()
        .iter()
        .map(|((agent, model), c)| {
            let cost = prices::of(model).map(|p| c.usage.cost(&p));
            total.add(c.requests, &c.usage, cost, model);
            ModelCost {
                agent: *agent,
                model: model.clone(),
                requests: c.requests,
                input_tokens: c.usage.input,
                output_tokens: c.usage.output,
                cache_write_tokens: c.usage.cache_write,
                cache_read_tokens: c.usage.cache_read,
                cost_usd: cost.map(dollars),
            }
        })
        .collect();
    BoxCost {
        name: name.to_string(),
        models,
        total,
        warnings,
    }
}

/// The sum of every box's.
pub(crate) fn total(boxes: &[BoxCost]) -> Sum {
    let mut sum = Sum::default();
    for b in boxes {
        let t = &b.total;
        let u = Usage {
            input: t.input_tokens,
            output: t.output_tokens,
            cache_write: t.cache_write_tokens,
            cache_read: t.cache_read_tokens,
        };
        sum.add(t.requests, &u, Some(t.picodollars), "");
        for m in &t.unpriced_models {
            if !sum.unpriced_models.contains(m) {
                sum.unpriced_models.push(m.clone());
            }
        }
    }
    sum
}

fn money(usd: f64) -> String {
    if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

/// The table `cost` prints: a row per box and model, then the total (box-written model names
/// escaped), and a line naming the models whose tokens have no price.
pub(crate) fn table(boxes: &[BoxCost], total: &Sum) -> Vec<String> {
    let cells = |b: &str, a: &str, m: &str, r: u64, u: [u64; 4], cost: String| {
        let mut row = vec![b.to_string(), a.to_string(), escaped(m), r.to_string()];
        row.extend(u.iter().map(ToString::to_string));
        row.push(cost);
        row
    };
    let mut rows = vec![
        [
            "BOX",
            "AGENT",
            "MODEL",
            "REQUESTS",
            "IN",
            "OUT",
            "CACHE-WRITE",
            "CACHE-READ",
            "COST",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for b in boxes {
        for m in &b.models {
            rows.push(cells(
                &b.name,
                m.agent.label(),
                &m.model,
                m.requests,
                [
                    m.input_tokens,
                    m.output_tokens,
                    m.cache_write_tokens,
                    m.cache_read_tokens,
                ],
                m.cost_usd.map_or_else(|| "-".into(), money),
            ));
        }
    }
    let unpriced = !total.unpriced_models.is_empty();
    rows.push(cells(
        "total",
        "",
        "",
        total.requests,
        [
            total.input_tokens,
            total.output_tokens,
            total.cache_write_tokens,
            total.cache_read_tokens,
        ],
        format!(
            "{}{}",
            money(total.cost_usd),
            if unpriced { "*" } else { "" }
        ),
    ));
    let mut lines = super::text::table(&rows);
    if unpriced {
        let names: Vec<String> = total.unpriced_models.iter().map(|m| escaped(m)).collect();
        lines.push(format!(
            "* without the models of no known price: {}",
            names.join(", ")
        ));
    }
    lines
}

/// `--since`: a time (`2026-12-01`, `2026-12-01T08:00:00Z`, `2026-12-01 08:00`) in UTC, or a
/// span back from `now` (`2h`, `3days`).
pub(crate) fn since(text: &str, now: SystemTime) -> Result<SystemTime, UserError> {
    let t = text.trim();
    if let Ok(span) = humantime::parse_duration(t) {
        return Ok(now.checked_sub(span).unwrap_or(SystemTime::UNIX_EPOCH));
    }
    let date_only = t.len() == 10 && t.as_bytes().get(4) == Some(&b'-');
    let full = if date_only {
        format!("{t}T00:00:00Z")
    } else {
        t.to_string()
    };
    humantime::parse_rfc3339_weak(&full).map_err(|_| {
        UserError::usage(
            format!("--since '{}' is no time", escaped(t)),
            "give a time in UTC (2026-12-01, 2026-12-01T08:00:00Z) or a span back from now (2h, 3days)",
        )
    })
}

/// `since` as the reports print it (to the second).
pub(crate) fn shown_time(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn at(s: &str) -> SystemTime {
        humantime::parse_rfc3339(s).unwrap()
    }

    /// Claude Code 2.1.197's lines of one streamed response (a thinking and a text block),
    /// as it wrote them against the stand-in (`tests/agents/standin.py`), trimmed.
    const CLAUDE_THINKING: &str = r#"{"parentUuid":"a","isSidechain":false,"message":{"model":"claude-opus-4-8","id":"msg_standin_68e2c05402ac4439","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"Standing in.","signature":"standin"}],"stop_reason":null,"usage":{"input_tokens":1499,"cache_creation_input_tokens":641,"cache_read_input_tokens":1069,"output_tokens":18,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0}}},"requestId":"req_standin_6c7eea161565","type":"assistant","uuid":"b","timestamp":"2026-12-03T08:25:40.230Z","sessionId":"e5ca8fb2"}"#;
    const CLAUDE_TEXT: &str = r#"{"parentUuid":"b","isSidechain":false,"message":{"model":"claude-opus-4-8","id":"msg_standin_68e2c05402ac4439","type":"message","role":"assistant","content":[{"type":"text","text":"STANDIN-REPLY turns=1"}],"stop_reason":null,"usage":{"input_tokens":1499,"cache_creation_input_tokens":641,"cache_read_input_tokens":1069,"output_tokens":18}},"requestId":"req_standin_6c7eea161565","type":"assistant","uuid":"c","timestamp":"2026-12-03T08:25:40.232Z","sessionId":"e5ca8fb2"}"#;
    const CLAUDE_USER: &str = r#"{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":"what is the usage?"},"uuid":"a","timestamp":"2026-12-03T08:25:40.100Z"}"#;

    fn claude(request: &str, model: &str, time: &str, u: [u64; 4]) -> String {
        serde_json::json!({
            "type": "assistant", "requestId": request, "timestamp": time,
            "message": {"model": model, "id": format!("msg_{request}"), "usage": {
                "input_tokens": u[0], "output_tokens": u[1],
                "cache_creation_input_tokens": u[2], "cache_read_input_tokens": u[3]}}
        })
        .to_string()
    }

    #[test]
    fn tokens_fall_in_the_span_between_snapshots_they_were_written_in_once_each() {
        use std::time::Duration;
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let entry = |time: Option<u64>, request: Option<&str>, input: u64| Entry {
            agent: Agent::ClaudeCode,
            model: "m".into(),
            time: time.map(at),
            request: request.map(str::to_string),
            usage: Usage {
                input,
                output: 1,
                cache_write: 10,
                cache_read: 100,
            },
        };
        // Snapshots at 100 and 200, given out of order.
        let mut spans = Intervals::new(vec![at(200), at(100)]);
        for e in [
            entry(Some(50), Some("r1"), 1000),
            // The same response's second line: counted once.
            entry(Some(60), Some("r1"), 1000),
            entry(Some(100), None, 2000),
            entry(Some(150), Some("r2"), 3000),
            // After the last snapshot, or without a time: in no span.
            entry(Some(250), Some("r3"), 4000),
            entry(None, Some("r4"), 5000),
        ] {
            spans.add(&e);
        }
        assert_eq!(
            [
                spans.tokens_until(at(100)),
                spans.tokens_until(at(200)),
                spans.tokens_until(at(150))
            ],
            [Some(1111 + 2111), Some(3111), None]
        );
    }

    #[test]
    fn a_claude_assistant_line_is_its_response_and_other_lines_nothing() {
        assert_eq!(
            claude_line(CLAUDE_THINKING),
            Some(Entry {
                agent: Agent::ClaudeCode,
                model: "claude-opus-4-8".into(),
                time: Some(at("2026-12-03T08:25:40.230Z")),
                request: Some("req_standin_6c7eea161565".into()),
                usage: Usage {
                    input: 1499,
                    output: 18,
                    cache_write: 641,
                    cache_read: 1069,
                },
            })
        );
        for not_one in [
            CLAUDE_USER,
            "",
            "{",
            "not json \"usage\"",
            r#"{"type":"assistant","message":{"usage":7}}"#,
            r#"{"type":"summary","message":{"usage":{"input_tokens":5}}}"#,
            "[\"usage\"]",
        ] {
            assert_eq!(claude_line(not_one), None, "{not_one}");
        }
        // No requestId: the message's id; no model: "unknown"; counts of the wrong type: 0.
        assert_eq!(
            claude_line(
                r#"{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":"9","output_tokens":2}}}"#
            ),
            Some(Entry {
                agent: Agent::ClaudeCode,
                model: "unknown".into(),
                time: None,
                request: Some("m1".into()),
                usage: Usage {
                    output: 2,
                    ..Usage::default()
                },
            })
        );
    }

    #[test]
    fn a_response_counts_once_however_many_lines_and_files_hold_it() {
        let mut t = Tally::new(None);
        for line in [CLAUDE_USER, CLAUDE_THINKING, CLAUDE_TEXT, CLAUDE_TEXT] {
            if let Some(e) = claude_line(line) {
                t.add(e);
            }
        }
        // A second request, and a subagent's on another model, each in two lines.
        for _ in 0..2 {
            t.add(
                claude_line(&claude(
                    "r2",
                    "claude-opus-4-8",
                    "2026-12-03T09:00:00Z",
                    [1, 2, 3, 4],
                ))
                .unwrap(),
            );
            t.add(
                claude_line(&claude(
                    "r3",
                    "claude-haiku-4-5-20251001",
                    "2026-12-03T09:00:01Z",
                    [10, 20, 0, 0],
                ))
                .unwrap(),
            );
        }
        let rows: Vec<_> = t.rows().iter().map(|(k, c)| (k.clone(), *c)).collect();
        assert_eq!(
            rows,
            [
                (
                    (Agent::ClaudeCode, "claude-haiku-4-5-20251001".to_string()),
                    Counted {
                        requests: 1,
                        usage: Usage {
                            input: 10,
                            output: 20,
                            cache_write: 0,
                            cache_read: 0
                        }
                    }
                ),
                (
                    (Agent::ClaudeCode, "claude-opus-4-8".to_string()),
                    Counted {
                        requests: 2,
                        usage: Usage {
                            input: 1500,
                            output: 20,
                            cache_write: 644,
                            cache_read: 1073
                        }
                    }
                ),
            ]
        );
    }

    /// Codex 0.171.0's rollout of a run and its resume against the stand-in, trimmed: a
    /// running sum per session, repeated once (a rate-limit update) and continued by the resume.
    fn codex_rollout() -> Vec<String> {
        let counts = |total: [u64; 3], last: [u64; 3]| {
            let c = |v: [u64; 3]| {
                serde_json::json!({"input_tokens": v[0], "cached_input_tokens": v[1],
                    "cache_write_input_tokens": 0, "output_tokens": v[2],
                    "reasoning_output_tokens": 5, "total_tokens": v[0] + v[2]})
            };
            serde_json::json!({"timestamp": "2026-12-03T08:25:48.276Z", "type": "event_msg",
                "payload": {"type": "token_count", "info": {"total_token_usage": c(total),
                    "last_token_usage": c(last), "model_context_window": 258_400},
                    "rate_limits": {"limit_id": "codex"}}})
            .to_string()
        };
        vec![
            r#"{"timestamp":"2026-12-03T08:25:48.221Z","type":"session_meta","payload":{"id":"01a23b02","model_provider":"standin"}}"#.into(),
            r#"{"timestamp":"2026-12-03T08:25:48.240Z","type":"turn_context","payload":{"turn_id":"t1","model":"gpt-standin"}}"#.into(),
            r#"{"timestamp":"2026-12-03T08:25:48.270Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":{}}}"#.into(),
            r#"{"timestamp":"2026-12-03T08:25:48.275Z","type":"token_usage_record","payload":{"response_id":"resp_1","usage":{"input_tokens":5270}}}"#.into(),
            counts([5270, 1317, 15], [5270, 1317, 15]),
            counts([5270, 1317, 15], [5270, 1317, 15]),
            r#"{"timestamp":"2026-12-03T08:25:48.528Z","type":"turn_context","payload":{"turn_id":"t2","model":"gpt-5-codex"}}"#.into(),
            counts([10632, 2657, 31], [5362, 1340, 16]),
            "{\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\"".into(),
        ]
    }

    #[test]
    fn codex_counts_what_each_token_count_adds_to_the_running_sum() {
        let mut r = CodexRollout::default();
        let entries: Vec<Entry> = codex_rollout().iter().filter_map(|l| r.line(l)).collect();
        let entry = |model: &str, u: [u64; 3]| Entry {
            agent: Agent::Codex,
            model: model.into(),
            time: Some(at("2026-12-03T08:25:48.276Z")),
            request: None,
            usage: Usage {
                input: u[0],
                output: u[1],
                cache_write: 0,
                cache_read: u[2],
            },
        };
        assert_eq!(
            entries,
            [
                entry("gpt-standin", [5270 - 1317, 15, 1317]),
                entry("gpt-5-codex", [5362 - 1340, 16, 1340]),
            ]
        );
        // A sum that went back (a new session in the same file): its last response.
        let mut r = CodexRollout::default();
        let lines = codex_rollout();
        let _ = r.line(&lines[7]);
        let back = r.line(&lines[4]).unwrap();
        assert_eq!(back.usage.input, 5270 - 1317);
    }

    #[test]
    fn since_leaves_out_what_was_written_before_it() {
        let mut t = Tally::new(Some(at("2026-12-03T09:00:00Z")));
        t.add(
            claude_line(&claude(
                "early",
                "m",
                "2026-12-03T08:59:59.999Z",
                [1, 0, 0, 0],
            ))
            .unwrap(),
        );
        t.add(
            claude_line(&claude(
                "on-time",
                "m",
                "2026-12-03T09:00:00Z",
                [2, 0, 0, 0],
            ))
            .unwrap(),
        );
        t.add(claude_line(&claude("late", "m", "2026-12-04T00:00:00Z", [4, 0, 0, 0])).unwrap());
        let mut no_time = claude_line(&claude("x", "m", "", [8, 0, 0, 0])).unwrap();
        no_time.time = None;
        t.add(no_time);
        let counted: Vec<_> = t.rows().values().copied().collect();
        assert_eq!(
            counted,
            [Counted {
                requests: 2,
                usage: Usage {
                    input: 6,
                    ..Usage::default()
                }
            }]
        );
        let now = at("2026-12-03T12:00:00Z");
        assert_eq!(since("2h", now).unwrap(), at("2026-12-03T10:00:00Z"));
        assert_eq!(since("3days", now).unwrap(), at("2026-11-30T12:00:00Z"));
        assert_eq!(
            since("2026-12-01", now).unwrap(),
            at("2026-12-01T00:00:00Z")
        );
        assert_eq!(
            since("2026-12-01T08:30:00Z", now).unwrap(),
            at("2026-12-01T08:30:00Z")
        );
        assert_eq!(
            since("2026-12-01 08:30:00", now).unwrap(),
            at("2026-12-01T08:30:00Z")
        );
        let bad = since("yesterday\x1b[2J", now).unwrap_err();
        assert_eq!(bad.message, "--since 'yesterday\\x1b[2J' is no time");
        assert_eq!(
            shown_time(at("2026-12-01T08:30:00.9Z")),
            "2026-12-01T08:30:00Z"
        );
    }

    /// Box a: a Claude response, and the Codex rollout (one model priced, one not); box b: a
    /// Sonnet response.
    fn two_boxes() -> [BoxCost; 2] {
        let mut a = Tally::new(None);
        a.add(
            claude_line(&claude(
                "r1",
                "claude-opus-4-8",
                "2026-12-03T09:00:00Z",
                [1_000_000, 100_000, 200_000, 2_000_000],
            ))
            .unwrap(),
        );
        let mut r = CodexRollout::default();
        for l in codex_rollout() {
            if let Some(e) = r.line(&l) {
                a.add(e);
            }
        }
        let mut b = Tally::new(None);
        b.add(
            claude_line(&claude(
                "r1",
                "claude-sonnet-4-5-20250929",
                "2026-12-03T09:00:00Z",
                [10, 1_000_000, 0, 0],
            ))
            .unwrap(),
        );
        [
            box_cost("a", &a, vec![]),
            box_cost("b", &b, vec!["b: a warning".into()]),
        ]
    }

    #[test]
    fn costs_by_model_per_box_and_in_total() {
        let boxes = two_boxes();
        // 1M in at $5, 0.1M out at $25, 0.2M written at $6.25, 2M read at $0.50.
        let opus = 9.75;
        // gpt-5-codex: 4022 in at $1.25, 16 out at $10, 1340 read at $0.125 (per million):
        // $0.0050275 + $0.00016 + $0.0001675.
        let codex = 0.005_355;
        assert_eq!(
            boxes[0],
            BoxCost {
                name: "a".into(),
                models: vec![
                    ModelCost {
                        agent: Agent::ClaudeCode,
                        model: "claude-opus-4-8".into(),
                        requests: 1,
                        input_tokens: 1_000_000,
                        output_tokens: 100_000,
                        cache_write_tokens: 200_000,
                        cache_read_tokens: 2_000_000,
                        cost_usd: Some(opus),
                    },
                    ModelCost {
                        agent: Agent::Codex,
                        model: "gpt-5-codex".into(),
                        requests: 1,
                        input_tokens: 4022,
                        output_tokens: 16,
                        cache_write_tokens: 0,
                        cache_read_tokens: 1340,
                        cost_usd: Some(codex),
                    },
                    ModelCost {
                        agent: Agent::Codex,
                        model: "gpt-standin".into(),
                        requests: 1,
                        input_tokens: 3953,
                        output_tokens: 15,
                        cache_write_tokens: 0,
                        cache_read_tokens: 1317,
                        cost_usd: None,
                    },
                ],
                total: Sum {
                    requests: 3,
                    input_tokens: 1_007_975,
                    output_tokens: 100_031,
                    cache_write_tokens: 200_000,
                    cache_read_tokens: 2_002_657,
                    cost_usd: 9.755_355,
                    unpriced_models: vec!["gpt-standin".into()],
                    picodollars: 9_755_355_000_000,
                },
                warnings: vec![],
            }
        );
        let sum = total(&boxes);
        assert_eq!(
            (
                sum.requests,
                sum.output_tokens,
                sum.cost_usd,
                &sum.unpriced_models
            ),
            (4, 1_100_031, 24.755_385, &vec!["gpt-standin".to_string()])
        );
    }

    #[test]
    fn the_table_has_a_row_per_box_and_model_and_a_total() {
        let boxes = two_boxes();
        let sum = total(&boxes);
        assert_eq!(
            table(&boxes, &sum),
            [
                "BOX    AGENT        MODEL                       REQUESTS  IN       OUT      CACHE-WRITE  CACHE-READ  COST",
                "a      claude-code  claude-opus-4-8             1         1000000  100000   200000       2000000     $9.75",
                "a      codex        gpt-5-codex                 1         4022     16       0            1340        $0.0054",
                "a      codex        gpt-standin                 1         3953     15       0            1317        -",
                "b      claude-code  claude-sonnet-4-5-20250929  1         10       1000000  0            0           $15.00",
                "total                                           4         1007985  1100031  200000       2002657     $24.76*",
                "* without the models of no known price: gpt-standin",
            ]
        );
    }

    #[test]
    fn a_box_written_model_name_is_cut_escaped_and_its_models_bounded() {
        let name = format!("evil\x1b]52;c;aGk=\x07\nforged line{}", "x".repeat(500));
        let mut t = Tally::new(None);
        t.add(claude_line(&claude("r", &name, "2026-12-03T09:00:00Z", [1, 1, 0, 0])).unwrap());
        for i in 0..MODELS_MAX + 5 {
            t.add(
                claude_line(&claude(
                    &format!("m{i}"),
                    &format!("model-{i}"),
                    "2026-12-03T09:00:00Z",
                    [1, 0, 0, 0],
                ))
                .unwrap(),
            );
        }
        let b = box_cost("a", &t, vec![]);
        assert_eq!(b.models.len(), MODELS_MAX + 1);
        assert!(
            b.models
                .iter()
                .any(|m| m.model == OTHER_MODELS && m.requests == 6)
        );
        let evil = b
            .models
            .iter()
            .find(|m| m.model.starts_with("evil"))
            .unwrap();
        // Exact in JSON (cut to MODEL_MAX characters), escaped on the terminal.
        assert_eq!(evil.model.chars().count(), MODEL_MAX);
        assert!(evil.model.contains('\x1b') && evil.model.contains('\n'));
        let lines = table(std::slice::from_ref(&b), &total(std::slice::from_ref(&b)));
        let shown = lines.iter().find(|l| l.contains("evil")).unwrap();
        assert!(
            shown.contains("evil\\x1b]52;c;aGk=\\x07\\nforged line"),
            "{shown}"
        );
        assert!(
            lines.iter().all(|l| !l.contains(['\x1b', '\x07', '\n'])),
            "{lines:?}"
        );
        assert!(lines.last().unwrap().contains("evil\\x1b"), "{lines:?}");
    }
}
