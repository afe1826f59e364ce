//! Paragraphs → sentences, for the encoder's batch.
//!
//! A sentence ends after `.`, `!`, `?`, `…` or their full-width forms (`。！？`), with any closing
//! quotes or brackets that follow, when whitespace comes next and the next word does not start
//! with a lower-case letter ("e.g. this" stays whole). Full-width enders end a sentence even
//! without whitespace (Korean, Japanese and Chinese text often has none). Line breaks always
//! end a sentence. Sentences are trimmed; blank ones are dropped.

/// Splits `text` into trimmed, non-empty sentences, in order.
pub fn split_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        split_line(line, &mut out);
    }
    out
}

fn split_line<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let full_width = matches!(c, '。' | '！' | '？');
        if matches!(c, '.' | '!' | '?' | '…') || full_width {
            // Swallow repeated enders and closing quotes / brackets.
            let mut j = i + 1;
            while j < chars.len()
                && (matches!(chars[j].1, '.' | '!' | '?' | '…' | '。' | '！' | '？')
                    || is_closing(chars[j].1))
            {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |&(b, _)| b);
            let next_is_space = chars.get(j).is_some_and(|&(_, n)| n.is_whitespace());
            let next_word = chars[j..]
                .iter()
                .map(|&(_, n)| n)
                .find(|n| !n.is_whitespace());
            let boundary = match next_word {
                None => false, // end of line: the line's end closes it anyway
                Some(n) => (next_is_space || full_width) && !n.is_lowercase(),
            };
            if boundary {
                push(&line[start..end], out);
                start = end;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    push(&line[start..], out);
}

fn is_closing(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | ')' | ']' | '}' | '»' | '”' | '’' | '」' | '』' | '）'
    )
}

fn push<'a>(sentence: &'a str, out: &mut Vec<&'a str>) {
    let sentence = sentence.trim();
    if !sentence.is_empty() {
        out.push(sentence);
    }
}

#[cfg(test)]
mod tests {
    use super::split_sentences;

    #[test]
    fn splits_on_enders_followed_by_space_and_a_new_sentence() {
        assert_eq!(
            split_sentences("Ein Hund rennt. Eine Frau singt! Warum? ja."),
            vec!["Ein Hund rennt.", "Eine Frau singt!", "Warum? ja."]
        );
        assert_eq!(
            split_sentences("He said \"Stop.\" Then he left..."),
            vec!["He said \"Stop.\"", "Then he left..."]
        );
    }

    #[test]
    fn keeps_abbreviations_before_lower_case_and_numbers_whole() {
        assert_eq!(split_sentences("e.g. this one"), vec!["e.g. this one"]);
        assert_eq!(
            split_sentences("It costs 3.50 euros."),
            vec!["It costs 3.50 euros."]
        );
    }

    #[test]
    fn korean_and_full_width_punctuation() {
        assert_eq!(
            split_sentences("오늘은 날씨가 좋다. 내일은 비가 온다."),
            vec!["오늘은 날씨가 좋다.", "내일은 비가 온다."]
        );
        assert_eq!(
            split_sentences("今日は。明日も！"),
            vec!["今日は。", "明日も！"]
        );
    }

    #[test]
    fn lines_and_blanks() {
        assert_eq!(split_sentences("a\n\n  b  \r\nc"), vec!["a", "b", "c"]);
        assert!(split_sentences("   \n\t ").is_empty());
        assert!(split_sentences("").is_empty());
        assert_eq!(split_sentences("no ender at all"), vec!["no ender at all"]);
        assert_eq!(split_sentences("!!! ???"), vec!["!!!", "???"]);
    }
}
