//! The process-wide registry of global functions (`TVMFuncGetGlobal` and friends): a table and
//! nothing more. The built-in functions are put in by the runtime's one init point
//! ([`crate::init`]); the registry never calls out to find them.

#![forbid(unsafe_code)]

use super::function::PackedFunc;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use once_cell::sync::Lazy;
use std::collections::BTreeMap;
use std::sync::RwLock;

type Table = BTreeMap<String, ObjRef<PackedFunc>>;

static REGISTRY: Lazy<RwLock<Table>> = Lazy::new(|| RwLock::new(Table::new()));

fn read() -> std::sync::RwLockReadGuard<'static, Table> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

fn write() -> std::sync::RwLockWriteGuard<'static, Table> {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

pub fn get(name: &str) -> Option<ObjRef<PackedFunc>> {
    read().get(name).cloned()
}

pub fn register(name: &str, f: ObjRef<PackedFunc>, override_existing: bool) -> Result<()> {
    let mut table = write();
    if !override_existing && table.contains_key(name) {
        return Err(Error::value(format!("Global PackedFunc {name} is already registered")));
    }
    table.insert(name.to_string(), f);
    Ok(())
}

pub fn remove(name: &str) {
    write().remove(name);
}

pub fn names() -> Vec<String> {
    read().keys().cloned().collect()
}

/// Has forks take the registry (a child must not find it held by a thread it does not have).
pub fn handle_forks() {
    crate::backend::fork::guard_static(&*REGISTRY);
}
