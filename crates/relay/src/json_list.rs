//! A list as one log field.

/// A list as one log field: JSON array text (`["shm","tcp"]`), which `--log-format json` embeds as a
/// real list (the binary's log writer does), and which reads plainly in text logs.
pub fn json_list<T: std::fmt::Display>(items: &[T]) -> String {
    serde_json::to_string(&items.iter().map(|i| i.to_string()).collect::<Vec<_>>()).unwrap_or_default()
}
