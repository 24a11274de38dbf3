//! Strings, shape tuples, arrays and maps, as TVM's Python package builds and reads them.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::error::{Error, Result};
use crate::object::AnyObject;
use crate::packed::{Args, ArrayObj, MapObj, RetValue, ShapeTupleObj, StringObj};

pub(super) fn register(reg: &mut Register<'_>) {
    // Containers.
    def(reg, "runtime.String", |a| Ok(StringObj::new(a.str(0)?).into()));
    def(reg, "runtime.GetFFIString", |a| Ok(a.str(0)?.into()));
    def(reg, "runtime.ShapeTuple", |a| {
        let dims = (0..a.len()).map(|i| a.int(i)).collect::<Result<Vec<_>>>()?;
        Ok(ShapeTupleObj::new(&dims).into())
    });
    def(reg, "runtime.GetShapeTupleSize", |a| {
        Ok(RetValue::Int(a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?.dims().len() as i64))
    });
    def(reg, "runtime.GetShapeTupleElem", |a| {
        let t = a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?;
        let i = a.int(1)?;
        let v = usize::try_from(i).ok().and_then(|i| t.dims().get(i).copied());
        v.map(RetValue::Int).ok_or_else(|| Error::index(format!("index {i} out of range ({} dims)", t.dims().len())))
    });
    def(reg, "runtime.Array", |a| Ok(ArrayObj::new(objects(a, 0)?).into()));
    def(reg, "runtime.ArraySize", |a| Ok(RetValue::Int(a.typed_object::<ArrayObj>(0, "Array")?.items().len() as i64)));
    def(reg, "runtime.ArrayGetItem", |a| {
        let arr = a.typed_object::<ArrayObj>(0, "Array")?;
        let i = a.int(1)?;
        let item = usize::try_from(i).ok().and_then(|i| arr.items().get(i).cloned());
        item.map(RetValue::Object)
            .ok_or_else(|| Error::index(format!("index {i} out of range ({} items)", arr.items().len())))
    });
    def(reg, "runtime.Map", |a| {
        if a.len() % 2 != 0 {
            return Err(Error::type_err("runtime.Map takes key, value pairs"));
        }
        let items = objects(a, 0)?;
        let pairs = items.chunks(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect();
        Ok(MapObj::new(pairs).into())
    });
    def(reg, "runtime.MapSize", |a| Ok(RetValue::Int(a.typed_object::<MapObj>(0, "Map")?.entries().len() as i64)));
    def(reg, "runtime.MapGetItem", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        let key = object_arg(a, 1)?;
        map.get(&key).cloned().map(RetValue::Object).ok_or_else(|| Error::key("key is not in the map"))
    });
    def(reg, "runtime.MapCount", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        Ok(RetValue::Int(map.get(&object_arg(a, 1)?).is_some() as i64))
    });
    def(reg, "runtime.MapItems", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        let flat = map.entries().iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect();
        Ok(ArrayObj::new(flat).into())
    });
    def(reg, "runtime.ObjectPtrHash", |a| Ok(RetValue::Int(object_arg(a, 0)?.as_ptr() as i64)));
}

fn object_arg(a: &Args<'_>, i: usize) -> Result<AnyObject> {
    if a.code(i) == crate::dlpack::kTVMStr {
        return Ok(StringObj::new(a.str(i)?).into_any());
    }
    a.object(i)?.ok_or_else(|| Error::value(format!("argument {i} is null")))
}

fn objects(a: &Args<'_>, from: usize) -> Result<Vec<AnyObject>> {
    (from..a.len()).map(|i| object_arg(a, i)).collect()
}
