//! Parsed `INFO` output.

use crate::role::{Role, UnknownRole};
use std::collections::HashMap;

/// Parsed `INFO` output: `field → value`.
#[derive(Debug, Clone, Default)]
pub struct Info(pub HashMap<String, String>);

impl Info {
    /// Parse the text of an `INFO` reply.
    pub fn parse(text: &str) -> Info {
        Info(text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect())
    }
    /// A field's text.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    /// A numeric field.
    pub fn num(&self, k: &str) -> Option<i64> {
        self.get(k)?.parse().ok()
    }
    /// The `role:` field (of `INFO replication`).
    pub fn role(&self) -> Result<Role, UnknownRole> {
        self.get("role").unwrap_or("").parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_skips_sections_and_keeps_values_with_colons() {
        let i = Info::parse("# Replication\r\nrole:slave\r\nmaster_host:::1\r\nmaster_repl_offset:42\r\n\r\nslave0:ip=1.2.3.4,port=5\r\n");
        assert_eq!(i.get("role"), Some("slave"));
        assert_eq!(i.get("master_host"), Some("::1"), "only the first colon separates");
        assert_eq!(i.num("master_repl_offset"), Some(42));
        assert_eq!(i.num("role"), None);
        assert_eq!(i.get("# Replication"), None);
        assert_eq!(i.get("missing"), None);
    }

    #[test]
    fn roles_parse_from_info_and_unknown_ones_are_errors() {
        assert_eq!(Info::parse("role:master\r\n").role(), Ok(Role::Master));
        assert_eq!(Info::parse("role:slave\r\n").role(), Ok(Role::Replica));
        assert_eq!(Info::parse("role:sentinel\r\n").role(), Err(UnknownRole("sentinel".into())));
        assert!(Info::parse("").role().unwrap_err().to_string().contains("no role"));
    }
}
