//! `static_library`: an object file (`.o`) an external codegen made, carried to `export_library`
//! to be linked into the shared library it writes (`runtime.ModuleLoadStaticLibrary`). It runs
//! nothing here; it keeps its bytes and the names of the functions they define.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{ArrayObj, PackedFunc, StringObj};
use crate::stream::Reader;
use std::any::Any;

pub struct StaticLibrary {
    data: Vec<u8>,
    func_names: Vec<String>,
}

impl StaticLibrary {
    /// `runtime.ModuleLoadStaticLibrary(path, func_names)`.
    pub fn load(path: &str, func_names: Vec<String>) -> Result<ObjRef<Module>> {
        let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Ok(Module::new(StaticLibrary { data, func_names }))
    }

    /// A blob entry: the bytes, then the function names (dmlc strings).
    pub fn load_binary(r: &mut Reader<'_>) -> Result<ObjRef<Module>> {
        let n = r.count(1)?;
        let data = r.bytes(n)?.to_vec();
        let func_names = r.strings()?.into_iter().map(str::to_string).collect();
        Ok(Module::new(StaticLibrary { data, func_names }))
    }
}

impl ModuleNode for StaticLibrary {
    fn type_key(&self) -> &str {
        "static_library"
    }

    fn get_function(&self, _: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if name != "get_func_names" {
            return Ok(None);
        }
        let names = ArrayObj::new(self.func_names.iter().map(|n| StringObj::new(n).into_any()).collect());
        Ok(Some(PackedFunc::native(move |_| Ok(names.clone().into()))))
    }

    fn property_mask(&self) -> i32 {
        property::BINARY_SERIALIZABLE | property::DSO_EXPORTABLE
    }

    fn format(&self) -> Result<String> {
        Ok("o".into())
    }

    fn save_to_file(&self, path: &str, _format: &str) -> Result<()> {
        std::fs::write(path, &self.data).map_err(|e| Error::io(path, e))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
