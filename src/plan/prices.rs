//! What the agents' models cost, per million tokens, for `ag-box cost`'s estimate.
//!
//! Prices as of 2026-12-03, in US dollars per million tokens (input, output, prompt-cache write,
//! prompt-cache read). Claude's are the table Claude Code 2.1.197 prices its own runs by (the
//! cache write at the 5-minute rate); the GPT and o-series ones are the published API prices (a
//! cache write costs what input does: none is billed apart). A model not listed here has no price: `cost` shows
//! its tokens and no cost. Pure: no I/O.

/// Micro-dollars per million tokens (so $0.075 is 75,000): exact integers, no float drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Price {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

/// When the table below was last checked.
pub(crate) const AS_OF: &str = "2026-12-03";

const fn usd(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
    // Whole micro-dollars: every price below has at most 6 decimals.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "positive prices of a handful of decimals"
    )]
    const fn micro(d: f64) -> u64 {
        (d * 1_000_000.0 + 0.5) as u64
    }
    Price {
        input: micro(input),
        output: micro(output),
        cache_write: micro(cache_write),
        cache_read: micro(cache_read),
    }
}

const OPUS_4: Price = usd(15.0, 75.0, 18.75, 1.5);
const OPUS_45: Price = usd(5.0, 25.0, 6.25, 0.5);
const SONNET: Price = usd(3.0, 15.0, 3.75, 0.3);
const HAIKU_45: Price = usd(1.0, 5.0, 1.25, 0.1);
const HAIKU_35: Price = usd(0.8, 4.0, 1.0, 0.08);
const FABLE_5: Price = usd(10.0, 50.0, 12.5, 1.0);
const GPT_5: Price = usd(1.25, 10.0, 1.25, 0.125);
const GPT_5_MINI: Price = usd(0.25, 2.0, 0.25, 0.025);
const GPT_5_NANO: Price = usd(0.05, 0.4, 0.05, 0.005);

/// Each model, by its name without a date or provider decoration ([`base_name`]).
const TABLE: &[(&str, Price)] = &[
    ("claude-opus-4", OPUS_4),
    ("claude-opus-4-0", OPUS_4),
    ("claude-opus-4-1", OPUS_4),
    ("claude-opus-4-5", OPUS_45),
    ("claude-opus-4-6", OPUS_45),
    ("claude-opus-4-7", OPUS_45),
    ("claude-opus-4-8", OPUS_45),
    ("claude-sonnet-5", SONNET),
    ("claude-sonnet-4", SONNET),
    ("claude-sonnet-4-0", SONNET),
    ("claude-sonnet-4-5", SONNET),
    ("claude-sonnet-4-6", SONNET),
    ("claude-3-7-sonnet", SONNET),
    ("claude-3-5-sonnet", SONNET),
    ("claude-haiku-4-5", HAIKU_45),
    ("claude-3-5-haiku", HAIKU_35),
    ("claude-fable-5", FABLE_5),
    ("claude-mythos-5", FABLE_5),
    ("gpt-5", GPT_5),
    ("gpt-5-codex", GPT_5),
    ("gpt-5.1", GPT_5),
    ("gpt-5.1-codex", GPT_5),
    ("gpt-5-mini", GPT_5_MINI),
    ("gpt-5.1-codex-mini", GPT_5_MINI),
    ("codex-mini-latest", usd(1.5, 6.0, 1.5, 0.375)),
    ("gpt-5-nano", GPT_5_NANO),
    ("gpt-4.1", usd(2.0, 8.0, 2.0, 0.5)),
    ("gpt-4.1-mini", usd(0.4, 1.6, 0.4, 0.1)),
    ("gpt-4o", usd(2.5, 10.0, 2.5, 1.25)),
    ("o3", usd(2.0, 8.0, 2.0, 0.5)),
    ("o4-mini", usd(1.1, 4.4, 1.1, 0.275)),
];

/// The model's name as the table keys it: lower case, without a provider's prefix
/// (`us.anthropic.`, `openai/`), a context tag (`[1m]`), a version (`@20251101`, `-v1:0`) or a
/// date (`-20250929`, `-2025-08-07`).
pub(crate) fn base_name(model: &str) -> String {
    let mut m = model.trim().to_ascii_lowercase();
    if let Some(at) = m.find(['[', '@']) {
        m.truncate(at);
    }
    if let Some(at) = m.rfind('/') {
        m = m[at + 1..].to_string();
    }
    if let Some(at) = m.find("claude-") {
        m = m[at..].to_string();
    }
    if let Some(at) = m.rfind("-v") {
        let version = &m[at + 2..];
        if version.starts_with(|c: char| c.is_ascii_digit())
            && version.chars().all(|c| c.is_ascii_digit() || c == ':')
        {
            m.truncate(at);
        }
    }
    for date in [8, 10] {
        let cut = m.len().saturating_sub(date + 1);
        // (`get`: a name from a transcript may hold any character there)
        let tail = m.get(cut..).unwrap_or("");
        let is_date = tail.len() == date + 1
            && tail.starts_with('-')
            && tail[1..].chars().enumerate().all(|(i, c)| {
                if date == 10 && (i == 4 || i == 7) {
                    c == '-'
                } else {
                    c.is_ascii_digit()
                }
            });
        if is_date {
            m.truncate(cut);
            break;
        }
    }
    m
}

/// The model's price; None when the table does not know it.
pub(crate) fn of(model: &str) -> Option<Price> {
    let name = base_name(model);
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn names_lose_their_dates_and_decorations() {
        let names: Vec<String> = [
            "claude-opus-4-8",
            "claude-opus-4-8[1m]",
            "claude-sonnet-4-5-20250929",
            "us.anthropic.claude-opus-4-1-20250805-v1:0",
            "claude-opus-4-5@20251101",
            "gpt-5-2025-08-07",
            "openai/GPT-5-Codex",
            "gpt-5.1-codex-mini",
            "o3",
        ]
        .iter()
        .map(|m| base_name(m))
        .collect();
        assert_eq!(
            names,
            [
                "claude-opus-4-8",
                "claude-opus-4-8",
                "claude-sonnet-4-5",
                "claude-opus-4-1",
                "claude-opus-4-5",
                "gpt-5",
                "gpt-5-codex",
                "gpt-5.1-codex-mini",
                "o3",
            ]
        );
    }

    #[test]
    fn known_models_have_their_price_and_others_none() {
        assert_eq!(
            of("claude-opus-4-8"),
            Some(Price {
                input: 5_000_000,
                output: 25_000_000,
                cache_write: 6_250_000,
                cache_read: 500_000,
            })
        );
        assert_eq!(of("claude-opus-4-20250514"), Some(OPUS_4));
        assert_eq!(of("claude-3-5-haiku-20241022"), Some(HAIKU_35));
        assert_eq!(
            of("gpt-5-codex"),
            Some(Price {
                input: 1_250_000,
                output: 10_000_000,
                cache_write: 1_250_000,
                cache_read: 125_000,
            })
        );
        assert_eq!(of("o4-mini").map(|p| p.cache_read), Some(275_000));
        for unknown in [
            "gpt-standin",
            "claude-opus-4-9",
            "",
            "<synthetic>",
            "claude-opus",
        ] {
            assert_eq!(of(unknown), None, "{unknown}");
        }
    }
}
