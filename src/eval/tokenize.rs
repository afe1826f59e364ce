//! sacreBLEU's default `13a` tokenizer (mteval-v13a), and Python's notion of whitespace.
//!
//! sacreBLEU 2.x tokenizes every BLEU segment with `Tokenizer13a`, which runs four regular
//! expressions over the padded line and then collapses whitespace with Python's `str.split()`.
//! This is a regex-free reimplementation of the same steps:
//!
//! 1. drop `<skipped>`, join `-\n` line breaks, turn other `\n` into spaces; if the line has an
//!    `&`, decode `&quot;` `&amp;` `&lt;` `&gt;` (in that order, once each);
//! 2. pad with one space on each side, then put spaces around the space and every ASCII
//!    punctuation character except `'`, `,`, `-` and `.`;
//! 3. split `.` and `,` off a preceding non-digit: `x.` becomes `x . `;
//! 4. split `.` and `,` off a following non-digit: `.x` becomes ` . x`;
//! 5. split `-` off a preceding digit: `3-` becomes `3 - `;
//! 6. split on Python whitespace and join with single spaces.
//!
//! Steps 3–5 are two-character patterns that Python's `re.sub` applies left to right without
//! overlap; [`sub_pairs`] does the same scan. "Digit" means ASCII `0`–`9` only, as in the
//! `[0-9]` character classes sacreBLEU uses.

/// True for the characters Python's `str.split()` / `str.isspace()` treat as whitespace.
///
/// That is Rust's [`char::is_whitespace`] (Unicode `White_Space`) plus the four ASCII
/// information separators U+001C–U+001F, which Python also counts. sacreBLEU splits words, and
/// chrF removes whitespace, by this rule.
pub fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `s` without trailing Python whitespace, like Python's `s.rstrip()`.
pub fn rstrip_python(s: &str) -> &str {
    s.trim_end_matches(is_python_whitespace)
}

/// Tokenizes one line exactly as sacreBLEU 2.x's `Tokenizer13a()(line)` does.
///
/// Tokens are separated by single spaces, with no leading or trailing space. (sacreBLEU's BLEU
/// calls this on `line.rstrip()`; [`super::corpus_bleu`] does the same.)
pub fn tokenize_13a(line: &str) -> String {
    let mut line = line
        .replace("<skipped>", "")
        .replace("-\n", "")
        .replace('\n', " ");
    if line.contains('&') {
        line = line
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }

    // Step 2: pad, and space out the ASCII symbols.
    let mut chars: Vec<char> = Vec::with_capacity(line.len() * 2 + 2);
    chars.push(' ');
    for c in line.chars() {
        if is_13a_symbol(c) {
            chars.extend([' ', c, ' ']);
        } else {
            chars.push(c);
        }
    }
    chars.push(' ');

    // Steps 3-5.
    let chars = sub_pairs(
        &chars,
        |a| !is_digit(a),
        is_period_or_comma,
        |out, a, b| out.extend([a, ' ', b, ' ']),
    );
    let chars = sub_pairs(
        &chars,
        is_period_or_comma,
        |b| !is_digit(b),
        |out, a, b| out.extend([' ', a, ' ', b]),
    );
    let chars = sub_pairs(
        &chars,
        is_digit,
        |b| b == '-',
        |out, a, b| out.extend([a, ' ', b, ' ']),
    );

    // Step 6.
    let joined: String = chars.into_iter().collect();
    let mut out = String::with_capacity(joined.len());
    for word in joined.split(is_python_whitespace).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The character class `[\{-\~\[-\` -\&\(-\+\:-\@\/]` of sacreBLEU's first 13a regex.
fn is_13a_symbol(c: char) -> bool {
    matches!(c,
        '{'..='~'      // { | } ~
        | '['..='`'    // [ \ ] ^ _ `
        | ' '..='&'    // space ! " # $ % &
        | '('..='+'    // ( ) * +
        | ':'..='@'    // : ; < = > ? @
        | '/')
}

/// `[0-9]`: ASCII digits only (Python's `re` does not widen an explicit range).
fn is_digit(c: char) -> bool {
    c.is_ascii_digit()
}

fn is_period_or_comma(c: char) -> bool {
    c == '.' || c == ','
}

/// Replaces every non-overlapping pair `(a, b)` with `first(a) && second(b)`, scanning left to
/// right as Python's `re.sub` does for a fixed two-character pattern: after a match the scan
/// resumes behind `b`, so `b` cannot start the next match.
fn sub_pairs(
    chars: &[char],
    first: impl Fn(char) -> bool,
    second: impl Fn(char) -> bool,
    replace: impl Fn(&mut Vec<char>, char, char),
) -> Vec<char> {
    let mut out = Vec::with_capacity(chars.len() + chars.len() / 2);
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            (a, Some(&b)) if first(a) && second(b) => {
                replace(&mut out, a, b);
                i += 2;
            }
            (a, _) => {
                out.push(a);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_whitespace_is_rust_whitespace_plus_information_separators() {
        // The set printed by `[hex(c) for c in range(0x110000) if chr(c).isspace()]` (Python 3.11).
        let python: [u32; 29] = [
            0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000,
            0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028,
            0x2029, 0x202f, 0x205f, 0x3000,
        ];
        let ours: Vec<u32> = (0..=0x10ffff_u32)
            .filter_map(char::from_u32)
            .filter(|&c| is_python_whitespace(c))
            .map(u32::from)
            .collect();
        assert_eq!(ours, python);
    }

    #[test]
    fn symbol_class_matches_the_regex_ranges() {
        let ascii: String = (0x20u8..0x7f)
            .map(char::from)
            .filter(|&c| is_13a_symbol(c))
            .collect();
        assert_eq!(ascii, " !\"#$%&()*+/:;<=>?@[\\]^_`{|}~");
    }

    #[test]
    fn periods_and_commas_stay_inside_numbers() {
        assert_eq!(tokenize_13a("It cost $1,234.56."), "It cost $ 1,234.56 .");
        assert_eq!(tokenize_13a("3-4 x-y"), "3 - 4 x-y");
        assert_eq!(tokenize_13a("a..b"), "a . . b");
    }

    #[test]
    fn rstrip_removes_python_whitespace_only_at_the_end() {
        assert_eq!(rstrip_python(" a b\t\u{1f}\u{3000} "), " a b");
        assert_eq!(rstrip_python("a\u{200b}"), "a\u{200b}");
    }
}
