//! Generated ids → the text a client sees, token by token: UTF-8 characters split
//! across tokens are held until complete, `stop` strings end the text (they are not
//! part of it, as OpenAI does) and a possible start of one is held until it is
//! decided.

/// The completion text of one request, built one token's bytes at a time.
#[derive(Debug, Default)]
pub struct TextStream {
    bytes: Vec<u8>,
    /// Bytes of `bytes` already handed out.
    emitted: usize,
    stops: Vec<Vec<u8>>,
    /// Set once a stop string matched: nothing more is emitted.
    stopped: bool,
    /// Characters handed out (for `text_offset`).
    chars: usize,
}

impl TextStream {
    /// A stream that ends at the first of `stops`.
    pub fn new(stops: &[String]) -> TextStream {
        TextStream {
            stops: stops.iter().map(|s| s.as_bytes().to_vec()).collect(),
            ..TextStream::default()
        }
    }

    /// Whether a stop string matched.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Characters handed out so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Appends one token's bytes; returns the text that became final (possibly
    /// empty). After a stop string matched, returns "" and [`TextStream::stopped`] is set.
    pub fn push(&mut self, token_bytes: &[u8]) -> String {
        if self.stopped {
            return String::new();
        }
        self.bytes.extend_from_slice(token_bytes);
        let pending = &self.bytes[self.emitted..];
        let hit = self.stops.iter().filter_map(|s| find(pending, s)).min();
        if let Some(at) = hit {
            self.stopped = true;
            let end = self.emitted + at;
            return self.take(end, true);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| partial_suffix(pending, s))
            .max()
            .unwrap_or(0);
        let end = self.bytes.len() - hold;
        self.take(end, false)
    }

    /// The rest of the text at the end of generation (an incomplete character
    /// becomes U+FFFD, as tiktoken's decode does).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let end = self.bytes.len();
        self.take(end, true)
    }

    /// Hands out `bytes[emitted..end]`; unless `all`, an incomplete character at the
    /// end is kept back.
    fn take(&mut self, end: usize, all: bool) -> String {
        let chunk = &self.bytes[self.emitted..end];
        let (text, used) = match std::str::from_utf8(chunk) {
            Ok(s) => (s.to_string(), chunk.len()),
            Err(e) if e.error_len().is_none() && !all => (
                // Only an incomplete character at the end: wait for its next bytes.
                String::from_utf8_lossy(&chunk[..e.valid_up_to()]).into_owned(),
                e.valid_up_to(),
            ),
            Err(_) => (String::from_utf8_lossy(chunk).into_owned(), chunk.len()),
        };
        self.emitted += used;
        self.chars += text.chars().count();
        text
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of the longest proper prefix of `stop` that `hay` ends with.
fn partial_suffix(hay: &[u8], stop: &[u8]) -> usize {
    (1..stop.len().min(hay.len() + 1))
        .rev()
        .find(|&k| hay.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_for_their_bytes() {
        let mut t = TextStream::new(&[]);
        let e = "é".as_bytes();
        assert_eq!(t.push(b"a"), "a");
        assert_eq!(t.push(&e[..1]), "");
        assert_eq!(t.push(&e[1..]), "é");
        assert_eq!(t.push(&e[..1]), "");
        assert_eq!(t.finish(), "\u{FFFD}");
        assert_eq!(t.chars(), 3);
    }

    #[test]
    fn stop_strings_end_the_text_and_are_not_part_of_it() {
        let mut t = TextStream::new(&["\n\n".into(), "END".into()]);
        assert_eq!(t.push(b"one"), "one");
        assert_eq!(t.push(b" E"), " ");
        assert_eq!(t.push(b"N"), "");
        assert_eq!(t.push(b"x"), "ENx");
        assert_eq!(t.push(b" two\n"), " two");
        assert_eq!(t.push(b"\nthree"), "");
        assert!(t.stopped());
        assert_eq!(t.push(b"more"), "");
        assert_eq!(t.finish(), "");
    }

    #[test]
    fn a_stop_inside_one_token() {
        let mut t = TextStream::new(&["b".into()]);
        assert_eq!(t.push(b"abc"), "a");
        assert!(t.stopped());
    }
}
