//! The C++ face: `extern "C"` functions the C++ layer (`cxx/*.cc`, which gives C++ hosts the
//! classes and functions upstream's headers declare) calls, like the C boundary's but left out of
//! the public header: telling objects apart and a host's type indices (`objects`), modules a host
//! defined (`host_module`), the threading API (`threading`). What C++ defines for the layers below
//! (vtables, the call shim, the imports mirror) is declared in `cxx_abi`; every bridge symbol is
//! declared once for both sides in `cxx/bridge.h`.

#![allow(clippy::missing_safety_doc)]

pub mod host_module;
pub mod objects;
pub mod threading;
