//! The one contract of every `--json` output: `schema_version`, every documented key present
//! (null when empty), full snapshot ids, timestamps in UTC to the second.

use serde_json::Value;

/// Timestamps (the values of `at`, `time` and `*_at` keys) to the second, as RFC 3339 in UTC
/// (`2026-12-01T22:06:52Z`), however many fractional digits they were written with.
pub(crate) fn normalized(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) if is_time_key(&k) => Value::String(to_the_second(&s)),
                        other => normalized(other),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        other => other,
    }
}

fn is_time_key(key: &str) -> bool {
    key == "at" || key == "time" || key.ends_with("_at")
}

/// `2026-12-01T22:06:52.572962648Z` (or `+00:00`) as `2026-12-01T22:06:52Z`; anything else
/// (another offset, not a timestamp) as it is.
pub(crate) fn to_the_second(ts: &str) -> String {
    let bytes = ts.as_bytes();
    let shaped = bytes.len() >= 19
        && bytes[..19].iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            10 => *b == b'T',
            13 | 16 => *b == b':',
            _ => b.is_ascii_digit(),
        });
    let rest = ts.get(19..).unwrap_or("");
    let fraction = rest
        .strip_prefix('.')
        .map_or("", |f| f.trim_start_matches(|c: char| c.is_ascii_digit()));
    let offset = if rest.starts_with('.') {
        fraction
    } else {
        rest
    };
    if shaped && matches!(offset, "Z" | "+00:00") {
        format!("{}Z", &ts[..19])
    } else {
        ts.to_string()
    }
}

/// The keys of `defaults` an object lacks, added with their default (null, `[]`, `false`).
pub(crate) fn fill(object: &mut Value, defaults: &[(&str, Value)]) {
    if let Value::Object(map) = object {
        for (key, value) in defaults {
            map.entry(*key).or_insert_with(|| value.clone());
        }
    }
}

/// What a box record lacks when it was written without its empty fields.
pub(crate) fn record_defaults() -> Vec<(&'static str, Value)> {
    vec![
        ("pinned_node", Value::Null),
        ("memory_max", Value::Null),
        ("uid", Value::Null),
        ("gid", Value::Null),
        ("network", Value::Null),
        ("allow", Value::Array(vec![])),
        ("agent", Value::Null),
        ("creds", Value::Null),
        ("lease", Value::Null),
        ("last_snapshot", Value::Null),
        ("dropping", Value::Bool(false)),
        ("op", Value::Null),
        ("forked_from", Value::Null),
    ]
}

/// A record as `--json` shows it: every key, and its last snapshot's paths.
pub(crate) fn record(mut v: Value) -> Value {
    fill(&mut v, &record_defaults());
    if let Some(snapshot) = v.get_mut("last_snapshot").filter(|s| s.is_object()) {
        fill(
            snapshot,
            &[
                ("paths", Value::Array(vec![])),
                ("on", Value::Null),
                ("same_as", Value::Null),
            ],
        );
        if let Some(on) = snapshot.get_mut("on").filter(|s| s.is_object()) {
            fill(on, &[("paths", Value::Array(vec![]))]);
        }
    }
    v
}

/// An event of a box's history, every key present.
pub(crate) fn event(mut v: Value) -> Value {
    fill(
        &mut v,
        &["epoch", "snapshot", "detail", "files_added", "bytes_added"].map(|k| (k, Value::Null)),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn timestamps_are_utc_to_the_second_wherever_they_are() {
        assert_eq!(
            normalized(json!({
                "at": "2026-12-01T22:06:52.572962648Z",
                "created_at": "2026-12-01T22:06:52Z",
                "nested": [{"time": "2026-12-01T22:06:52.5+00:00", "name": "2026-12-01T22:06:52.5Z"}],
                "lease": {"renewed_at": "2026-12-01T22:06:52.1+02:00"},
                "timer": "active",
            })),
            json!({
                "at": "2026-12-01T22:06:52Z",
                "created_at": "2026-12-01T22:06:52Z",
                "nested": [{"time": "2026-12-01T22:06:52Z", "name": "2026-12-01T22:06:52.5Z"}],
                "lease": {"renewed_at": "2026-12-01T22:06:52.1+02:00"},
                "timer": "active",
            })
        );
        assert_eq!(to_the_second("soon"), "soon");
        assert_eq!(to_the_second("2026-12-01T22:06:52"), "2026-12-01T22:06:52");
    }

    #[test]
    fn a_record_written_without_its_empty_fields_shows_them() {
        let v = record(json!({
            "version": 1, "name": "a", "path": "/p", "created_at": "t", "nix": false,
            "pinned_node": null, "memory_max": null, "lease": null,
            "last_snapshot": {"id": "abc", "at": "t", "node": "n", "epoch": 1},
        }));
        assert_eq!(
            v,
            json!({
                "version": 1, "name": "a", "path": "/p", "created_at": "t", "nix": false,
                "pinned_node": null, "memory_max": null, "uid": null, "gid": null,
                "network": null, "allow": [], "agent": null, "creds": null, "lease": null, "dropping": false,
                "op": null, "forked_from": null,
                "last_snapshot": {"id": "abc", "at": "t", "node": "n", "epoch": 1, "paths": [],
                    "on": null, "same_as": null},
            })
        );
        assert_eq!(
            event(json!({"time": "t", "node": "n", "operator": "o", "verb": "up", "epoch": 2})),
            json!({"time": "t", "node": "n", "operator": "o", "verb": "up", "epoch": 2,
                   "snapshot": null, "detail": null, "files_added": null, "bytes_added": null})
        );
    }
}
