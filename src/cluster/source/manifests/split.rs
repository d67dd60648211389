//! A YAML stream cut into its documents, so each document is parsed on its own and a syntax error
//! in one cannot hide the others.
//!
//! Pure: slices of the input, no allocation of text, never fails. It relies on a YAML rule: a line
//! starting with `---` or `...` followed by a blank or the line's end is a document marker
//! wherever it appears, even inside block or quoted scalars, so cutting at such lines is exact.

/// One document's text (markers included) and its number, counted from 1.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Document<'a> {
    pub number: usize,
    pub text: &'a str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Line {
    /// `---`: starts a document (and may carry its content on the same line).
    Start,
    /// `...`: ends a document.
    End,
    /// Blank, a comment, or a `%` directive: belongs to whatever document comes next.
    Prelude,
    Content,
}

fn classify(line: &str) -> Line {
    let marker = |m: &str| {
        line.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
    };
    if marker("---") {
        Line::Start
    } else if marker("...") {
        Line::End
    } else {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || line.starts_with('%') {
            Line::Prelude
        } else {
            Line::Content
        }
    }
}

/// Cuts `text` into documents. Lines before a document's first content or `---` (comments,
/// directives) stay with that document; a `---` only starts a new document once the current one
/// has begun, so `# header\n---\na: 1` is one document, not an empty one and a second.
pub(super) fn split(text: &str) -> Vec<Document<'_>> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut begun = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let end = offset + line.len();
        match classify(line) {
            Line::Start => {
                if begun {
                    documents.push(&text[start..offset]);
                    start = offset;
                }
                begun = true;
            }
            Line::End => {
                documents.push(&text[start..end]);
                start = end;
                begun = false;
            }
            Line::Prelude => {}
            Line::Content => begun = true,
        }
        offset = end;
    }
    if start < text.len() || documents.is_empty() {
        documents.push(&text[start..]);
    }
    documents
        .into_iter()
        .enumerate()
        .map(|(i, text)| Document {
            number: i + 1,
            text,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<&str> {
        split(text).into_iter().map(|d| d.text).collect()
    }

    #[test]
    fn separators_start_new_documents() {
        assert_eq!(texts("a: 1\n---\nb: 2\n"), ["a: 1\n", "---\nb: 2\n"]);
    }

    #[test]
    fn leading_separator_and_comments_do_not_make_an_empty_first_document() {
        assert_eq!(
            texts("# hi\n---\na: 1\n---\nb: 2"),
            ["# hi\n---\na: 1\n", "---\nb: 2"]
        );
    }

    #[test]
    fn directives_after_an_end_marker_stay_with_the_next_document() {
        assert_eq!(
            texts("a: 1\n...\n%YAML 1.2\n---\nb: 2\n"),
            ["a: 1\n...\n", "%YAML 1.2\n---\nb: 2\n"]
        );
    }

    #[test]
    fn dashes_that_are_not_markers_are_content() {
        assert_eq!(texts("a: |\n  ---\nb: ----\n"), ["a: |\n  ---\nb: ----\n"]);
        assert_eq!(
            texts("--- {a: 1}\r\n---\tb\r\n"),
            ["--- {a: 1}\r\n", "---\tb\r\n"]
        );
    }

    #[test]
    fn empty_text_is_one_empty_document() {
        assert_eq!(texts(""), [""]);
    }

    #[test]
    fn documents_are_numbered_from_one() {
        let numbers: Vec<usize> = split("a\n---\nb\n---\n").iter().map(|d| d.number).collect();
        assert_eq!(numbers, [1, 2, 3]);
    }
}
