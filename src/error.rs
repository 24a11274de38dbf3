//! One error type for the whole runtime. Its `Display` is what a C caller reads from
//! `TVMGetLastError` after the kind prefix, so every message names what was wrong and where.

#![forbid(unsafe_code)]

use std::fmt;

/// The kind TVM's Python FFI maps to an exception class (first word of the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    TVMError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    InternalError,
}

impl ErrorKind {
    /// The kind a message's first word names.
    pub fn parse(name: &str) -> Option<ErrorKind> {
        use ErrorKind::*;
        [TVMError, ValueError, TypeError, IndexError, KeyError, AttributeError, InternalError]
            .into_iter()
            .find(|k| format!("{k:?}") == name)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A runtime error. Boxed, so `Result<T>` stays small on the hot paths that return it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<Repr>);

#[derive(Debug, thiserror::Error)]
enum Repr {
    /// A message with an explicit kind.
    #[error("{msg}")]
    Msg { kind: ErrorKind, msg: String },
    /// A failure reported by foreign code (a kernel or a host callback) through the thread's last
    /// error; kept verbatim, it may already carry its own `Kind:` prefix.
    #[error("{0}")]
    Foreign(String),
    #[error("{context}: {source}")]
    Context { context: String, source: Error },
    #[error("I/O error on {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A callback failed and left a Python exception in the thread's last error: it must reach
    /// the caller unchanged, so nothing may overwrite it.
    #[error("a Python exception was raised in a callback")]
    PythonPending,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error(Box::new(Repr::Msg { kind, msg: msg.into() }))
    }
    /// A failure foreign code reported through the thread's last error, kept verbatim.
    pub fn foreign(msg: impl Into<String>) -> Error {
        Error(Box::new(Repr::Foreign(msg.into())))
    }
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Error {
        Error(Box::new(Repr::Io { path: path.into(), source }))
    }
    /// The thread's last error already holds a Python exception for this failure.
    pub fn python_pending() -> Error {
        Error(Box::new(Repr::PythonPending))
    }
    pub fn value(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::ValueError, msg)
    }
    pub fn type_err(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::TypeError, msg)
    }
    pub fn index(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::IndexError, msg)
    }
    pub fn key(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::KeyError, msg)
    }
    pub fn attribute(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::AttributeError, msg)
    }
    pub fn tvm(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::TVMError, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::InternalError, msg)
    }
    /// An error hosts must see in its own class: native errors reach C callers as InternalError,
    /// as upstream's `LOG(FATAL)` ones do, but where upstream names a class in its message
    /// (`AttributeError: ...`, which Python's `__getattr__` relies on), so does this one.
    pub fn classed(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error::foreign(format!("{kind}: {}", msg.into()))
    }

    /// Prefixes the message with where it happened, keeping the kind.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error(Box::new(Repr::Context { context: context.into(), source: self }))
    }

    /// Whether the failure is a file's (opening, reading or writing a path).
    pub fn is_io(&self) -> bool {
        match &*self.0 {
            Repr::Io { .. } => true,
            Repr::Context { source, .. } => source.is_io(),
            _ => false,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        match &*self.0 {
            Repr::Msg { kind, .. } => *kind,
            Repr::Foreign(_) | Repr::Io { .. } | Repr::PythonPending => ErrorKind::TVMError,
            Repr::Context { source, .. } => source.kind(),
        }
    }

    /// The full text for `TVMGetLastError`: `"InternalError: <message>"`, the class upstream's
    /// runtime reports its own failures with (its checks throw `InternalError`, which TVM's Python
    /// raises as `tvm.error.InternalError`, a `RuntimeError`: what hosts written against it
    /// catch). A foreign message that already starts with a kind keeps it, so Python raises the
    /// class the callee meant, as upstream's does; a kernel's bare message is a `TVMError`. [`Error::kind`] keeps the finer kind for Rust.
    pub fn to_c_message(&self) -> String {
        match self.foreign_root() {
            Some(inner) if has_kind_prefix(inner) => {
                let (kind, rest) = inner.split_once(": ").unwrap_or((inner, ""));
                format!("{kind}: {}{rest}", self.context_prefix())
            }
            // A kernel's own failure ("Assert fail: ..."): upstream reports it as a TVMError.
            Some(_) => format!("{}: {}", ErrorKind::TVMError, self),
            None => format!("{}: {}", ErrorKind::InternalError, self),
        }
    }

    /// Whether the thread's last error already holds this failure (a Python exception).
    pub fn is_python_pending(&self) -> bool {
        match &*self.0 {
            Repr::PythonPending => true,
            Repr::Context { source, .. } => source.is_python_pending(),
            _ => false,
        }
    }

    fn foreign_root(&self) -> Option<&str> {
        match &*self.0 {
            Repr::Foreign(s) => Some(s),
            Repr::Context { source, .. } => source.foreign_root(),
            _ => None,
        }
    }

    fn context_prefix(&self) -> String {
        match &*self.0 {
            Repr::Context { context, source } => format!("{context}: {}", source.context_prefix()),
            _ => String::new(),
        }
    }
}

/// Whether `msg` starts with `SomeError: ` as TVM's error normaliser writes it.
fn has_kind_prefix(msg: &str) -> bool {
    match msg.split_once(": ") {
        Some((head, _)) => {
            let head = head.strip_prefix("tvm.error.").unwrap_or(head);
            !head.is_empty() && head.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && head.ends_with("Error")
        }
        None => false,
    }
}

/// Adds context to the error of a `Result`, lazily.
pub trait ResultExt<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| e.context(f()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_message_has_kind_and_context() {
        let e = Error::key("no input named 'x'").context("set_input");
        assert_eq!(e.to_c_message(), "InternalError: set_input: no input named 'x'");
        assert_eq!(e.kind(), ErrorKind::KeyError);
    }

    #[test]
    fn foreign_kind_is_kept() {
        let e = Error::foreign("ValueError: bad").context("node 3");
        assert_eq!(e.to_c_message(), "ValueError: node 3: bad");
        let e = Error::foreign("Assert fail: num_args == 2").context("node 3");
        assert_eq!(e.to_c_message(), "TVMError: node 3: Assert fail: num_args == 2");
        assert_eq!(
            Error::io("f", std::io::ErrorKind::NotFound.into()).to_c_message().split(':').next(),
            Some("InternalError")
        );
    }
}
