//! dmlc binary streams (little-endian PODs, `u64`-prefixed strings and vectors): a bounds-checked
//! reader that names the byte offset of any failure, and a writer.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// An error about the data at the current offset.
    pub fn error(&self, msg: impl std::fmt::Display) -> Error {
        Error::value(format!("{}: {msg} (at byte offset {})", self.what, self.pos))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.error(format!("truncated: {n} bytes needed, {} left", self.remaining())));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A count of items each at least `min_item_bytes` long: refuses counts the data cannot hold,
    /// so a corrupt count never drives a huge allocation.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64()?;
        let fits = usize::try_from(n).ok().filter(|&n| n.saturating_mul(min_item_bytes.max(1)) <= self.remaining());
        fits.ok_or_else(|| {
            Error::value(format!(
                "{}: count {n} at byte offset {at} exceeds the {} bytes that follow",
                self.what,
                self.remaining()
            ))
        })
    }

    pub fn string(&mut self) -> Result<&'a str> {
        let n = self.count(1)?;
        let at = self.pos;
        let b = self.bytes(n)?;
        std::str::from_utf8(b)
            .map_err(|_| Error::value(format!("{}: string at byte offset {at} is not UTF-8", self.what)))
    }

    pub fn strings(&mut self) -> Result<Vec<&'a str>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.string()).collect()
    }

    pub fn u64s(&mut self) -> Result<Vec<u64>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
}

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    pub fn string(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }
}
