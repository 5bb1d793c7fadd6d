//! What a libtest run says it did: the passed and failed counts of its `test result:` lines.

#[derive(Debug, Default, PartialEq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
}

impl Counts {
    /// Adds the counts of a libtest line such as
    /// `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result:") else {
            return;
        };
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                _ => {}
            }
        }
    }
}
