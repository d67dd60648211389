//! An error and its causes on one line, `outer: inner: innermost`: how every error that ends a
//! command or fails a sync is shown to an operator.
//!
//! Pure. A cause whose text its outer error already ends with is not repeated: several crates'
//! errors print their source themselves (kube's `KubeconfigError` does) and also return it from
//! `source()`, which would show the same words twice.

/// `error` and each of its causes, joined with `: `.
pub fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let words = c.to_string();
        if !text.ends_with(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_follow_in_order() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(one_line(&e), "outer: inner");
    }

    #[test]
    fn a_cause_its_outer_error_already_prints_is_not_repeated() {
        let e = kube::config::Kubeconfig::read_from("/nonexistent/kubeconfig").unwrap_err();
        let text = one_line(&e);
        assert_eq!(
            text.matches("No such file or directory").count(),
            1,
            "{text}"
        );
    }
}
