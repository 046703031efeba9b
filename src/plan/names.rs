//! Box name rule: `[a-z0-9][a-z0-9._-]{0,62}`.

use crate::error::UserError;

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

    #[test]
    fn accepts_the_rule() {
        for ok in ["a", "0", "my-proj", "p.v2_x", &"a".repeat(63)] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        for bad in [
            "",
            "a/b",
            "..",
            "../x",
            "a b",
            "Proj",
            ".hidden",
            "-x",
            "_x",
            "x\n",
            "é",
            &"a".repeat(64),
        ] {
            let e = validate(bad).unwrap_err();
            assert_eq!(e.code, crate::error::Code::Usage);
            assert!(e.to_string().contains("invalid box name"), "{bad}");
        }
    }
}
