//! The Module object: a node (library, factory, executor, ...) plus its imports. Functions are
//! looked up by name in the node, then, when asked, depth-first in the imports.

// No unsafe code of its own: `object_type!`'s deleter is the one exception, which it allows.
#![deny(unsafe_code)]

use crate::cxx_abi::CxxImports;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::packed::PackedFunc;
use std::any::Any;
use std::sync::{Arc, RwLock};

/// Property bits reported by `runtime.ModuleGetPropertyMask`.
pub mod property {
    pub const BINARY_SERIALIZABLE: i32 = 0b001;
    pub const RUNNABLE: i32 = 0b010;
    pub const DSO_EXPORTABLE: i32 = 0b100;
}

/// Reads one module of a type key from a module blob's stream (`__tvm_dev_mblob`): what the
/// library layer calls for modules it does not interpret itself.
pub type Loader = fn(&mut crate::stream::Reader<'_>) -> crate::error::Result<ObjRef<Module>>;

/// A module argument of a packed call (`args.module(i)`): the module layer's typed accessor over
/// the packed layer's arguments, which know objects but not modules.
pub trait ModuleArg {
    fn module(&self, i: usize) -> Result<ObjRef<Module>>;
}

impl ModuleArg for crate::packed::Args<'_> {
    fn module(&self, i: usize) -> Result<ObjRef<Module>> {
        self.typed_object(i, "Module")
    }
}

pub trait ModuleNode: Any + Send + Sync + 'static {
    fn type_key(&self) -> &str;

    /// The function `name` of this node alone; `this` is the module that owns the node, for
    /// functions that must keep it alive.
    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>>;

    fn property_mask(&self) -> i32 {
        0
    }

    /// Upstream's `GetSource(format)`: the code the module was made from, where it keeps any.
    fn source(&self, _format: &str) -> Result<String> {
        Err(unsupported(self.type_key(), "GetSource"))
    }

    /// Upstream's `GetFormat()`: the format `save_to_file` writes.
    fn format(&self) -> Result<String> {
        Err(unsupported(self.type_key(), "GetFormat"))
    }

    /// Upstream's `SaveToFile(path, format)`: a file its format's loader
    /// (`runtime.module.loadfile_<format>`) reads back.
    fn save_to_file(&self, _path: &str, _format: &str) -> Result<()> {
        Err(unsupported(self.type_key(), "SaveToFile"))
    }

    /// The import list, for a node that keeps it itself (a C++ host's module: its `imports_`,
    /// which its own code walks); `None`: the module's own list is the list.
    fn kept_imports(&self) -> Option<&dyn KeptImports> {
        None
    }

    /// What the node stands for, when it stands for an object of someone else's (a C++ host's
    /// module, which many stand-ins may stand for): modules are the same when this is.
    fn stands_for(&self) -> Option<usize> {
        None
    }

    fn as_any(&self) -> &dyn Any;
}

/// An import list a node keeps itself (see `ModuleNode::kept_imports`).
pub trait KeptImports {
    fn list(&self) -> Vec<ObjRef<Module>>;
    fn push(&self, dep: &ObjRef<Module>) -> Result<()>;
    fn clear(&self);
}

/// Upstream's words for a module function a type does not have.
fn unsupported(type_key: &str, what: &str) -> Error {
    Error::tvm(format!("Module[{type_key}] does not support {what}"))
}

/// Laid out for C++ hosts first: upstream's `ModuleNode::imports_` (a `std::vector<Module>`) sits
/// right after the object header, and the headers' inline `imports()` reads it: a mirror of
/// `imports`, rebuilt whenever that changes.
#[repr(C)]
pub struct Module {
    cxx_imports: CxxImports,
    node: Arc<dyn ModuleNode>,
    imports: RwLock<Vec<ObjRef<Module>>>,
}

crate::object::object_type!(
    Module,
    crate::object::type_index::MODULE,
    crate::cxx_abi::ModulePrefix,
    crate::cxx_abi::ModulePrefix::default()
);

// The payload starts right after the header (`object`), so the mirror is at header + 16 as
// upstream's `imports_` (cxx/runtime.h checks the C++ side).
const _: () = assert!(std::mem::offset_of!(Module, cxx_imports) == 0);

impl Module {
    pub fn new(node: impl ModuleNode) -> ObjRef<Module> {
        ObjRef::new(Module {
            cxx_imports: CxxImports::default(),
            node: Arc::new(node),
            imports: RwLock::new(Vec::new()),
        })
    }

    pub fn type_key(&self) -> &str {
        self.node.type_key()
    }

    pub fn property_mask(&self) -> i32 {
        self.node.property_mask()
    }

    pub fn source(&self, format: &str) -> Result<String> {
        self.node.source(format)
    }

    pub fn format(&self) -> Result<String> {
        self.node.format()
    }

    pub fn save_to_file(&self, path: &str, format: &str) -> Result<()> {
        self.node.save_to_file(path, format)
    }

    /// The node as its concrete type.
    pub fn node<T: 'static>(&self) -> Option<&T> {
        self.node.as_any().downcast_ref::<T>()
    }

    /// The node, shared, when it is a `T`: for what must reach it without going through the
    /// module at every use (an executor's functions).
    pub fn shared_node<T: ModuleNode>(&self) -> Option<Arc<T>> {
        let any: Arc<dyn Any + Send + Sync> = self.node.clone();
        any.downcast::<T>().ok()
    }

    pub fn imports(&self) -> Vec<ObjRef<Module>> {
        match self.node.kept_imports() {
            Some(kept) => kept.list(),
            None => self.imports.read().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    pub fn clear_imports(&self) {
        if let Some(kept) = self.node.kept_imports() {
            return kept.clear();
        }
        let mut imports = self.imports.write().unwrap_or_else(|e| e.into_inner());
        imports.clear();
        self.cxx_imports.set(&mut imports, |m| m.as_ptr().cast());
    }

    /// Adds `dep` to the imports of `this`, refusing cycles.
    pub fn import(this: &ObjRef<Module>, dep: ObjRef<Module>) -> Result<()> {
        if Module::same(this, &dep) || dep.reaches(this) {
            return Err(Error::value("Cyclic dependency detected during import"));
        }
        if let Some(kept) = this.node.kept_imports() {
            return kept.push(&dep);
        }
        let mut imports = this.imports.write().unwrap_or_else(|e| e.into_inner());
        imports.push(dep);
        this.cxx_imports.set(&mut imports, |m| m.as_ptr().cast());
        Ok(())
    }

    /// Whether `a` and `b` are one module (stand-ins for one host module are).
    pub fn same(a: &ObjRef<Module>, b: &ObjRef<Module>) -> bool {
        ObjRef::ptr_eq(a, b) || a.node.stands_for().is_some_and(|x| b.node.stands_for() == Some(x))
    }

    fn reaches(&self, target: &ObjRef<Module>) -> bool {
        self.imports().iter().any(|m| Module::same(m, target) || m.reaches(target))
    }

    pub fn get_function(this: &ObjRef<Module>, name: &str, query_imports: bool) -> Result<Option<ObjRef<PackedFunc>>> {
        if let Some(f) = this.node.get_function(this, name)? {
            return Ok(Some(f));
        }
        if query_imports {
            for m in this.imports() {
                if let Some(f) = Module::get_function(&m, name, true)? {
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    /// Like `get_function`, failing with a message when the function does not exist.
    pub fn require_function(this: &ObjRef<Module>, name: &str) -> Result<ObjRef<PackedFunc>> {
        Module::get_function(this, name, true)?
            .ok_or_else(|| Error::attribute(format!("module of type '{}' has no function '{name}'", this.type_key())))
    }
}
