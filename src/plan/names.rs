//! Box name rule: `[a-z0-9][a-z0-9._-]{0,62}`.

use std::fmt;
use std::ops::Deref;

use crate::error::UserError;

/// A box name that passed [`validate`]: what the verbs and the sequences take, so a name from
/// the command line cannot reach them unchecked. (Records keep a plain `String`: one with a
/// bad name is reported by `Meta::problem`, not refused as it is read.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub(crate) struct BoxName(String);

impl BoxName {
    pub(crate) fn new(name: impl Into<String>) -> Result<BoxName, UserError> {
        let name = name.into();
        validate(&name)?;
        Ok(BoxName(name))
    }
}

impl Deref for BoxName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn validate(name: &str) -> Result<(), UserError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(UserError::usage(
            format!("invalid box name '{name}'"),
            "use 1-63 chars of a-z 0-9 . _ -, starting with a letter or digit",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: [&str; 4] = ["a", "0", "my-proj", "p.v2_x"];

    fn bad_names() -> Vec<String> {
        let mut bad: Vec<String> = [
            "", "a/b", "..", "../x", "a b", "Proj", ".hidden", "-x", "_x", "x\n", "é",
        ]
        .map(String::from)
        .to_vec();
        bad.push("a".repeat(64));
        bad
    }

    #[test]
    fn accepts_the_rule() {
        for ok in GOOD.map(String::from).into_iter().chain(["a".repeat(63)]) {
            assert!(validate(&ok).is_ok(), "{ok}");
            let name = BoxName::new(ok.as_str()).unwrap();
            assert_eq!((&*name, name.to_string()), (ok.as_str(), ok.clone()));
        }
    }

    #[test]
    fn refuses_everything_else() {
        for bad in bad_names() {
            let e = validate(&bad).unwrap_err();
            assert_eq!(e.code, crate::error::Code::Usage);
            assert!(e.to_string().contains("invalid box name"), "{bad}");
        }
    }

    /// The same refusal, word for word, as the verbs gave before they took a `BoxName`.
    #[test]
    fn a_box_name_is_refused_as_validate_refuses() {
        for bad in bad_names() {
            let e = BoxName::new(bad.as_str()).unwrap_err();
            let v = validate(&bad).unwrap_err();
            assert_eq!(
                (e.code, e.to_string(), e.hint.clone()),
                (v.code, v.to_string(), v.hint.clone()),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_box_name_serializes_as_the_bare_string() {
        let name = BoxName::new("my-proj").unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"my-proj\"");
    }
}
