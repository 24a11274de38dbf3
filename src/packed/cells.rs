//! Arguments as tvm-ffi's `Any` cells (16 bytes each: a type index, then the value), the form
//! TVM 0.21+ kernels and every tvm-ffi function take: translated from classic packed arguments
//! or from a VM's borrowed items, on the stack for the usual few. A cell borrows what its
//! argument points at.

#![forbid(unsafe_code)]

use super::args::{type_code_name, Args, Item};
use crate::dlpack::*;
use crate::error::{Error, Result};

/// tvm-ffi's type indices for the values a kernel takes or returns.
pub(crate) mod index {
    pub(crate) const NONE: i32 = 0;
    pub(crate) const INT: i32 = 1;
    pub(crate) const BOOL: i32 = 2;
    pub(crate) const FLOAT: i32 = 3;
    pub(crate) const OPAQUE_PTR: i32 = 4;
    pub(crate) const DATA_TYPE: i32 = 5;
    pub(crate) const DEVICE: i32 = 6;
    pub(crate) const DL_TENSOR_PTR: i32 = 7;
    pub(crate) const RAW_STR: i32 = 8;
    pub(crate) const STATIC_OBJECT_BEGIN: i32 = 64;
}

pub(crate) fn cell(type_index: i32, value: u64) -> TVMFFIAny {
    TVMFFIAny { type_index, small_len: 0, value }
}

fn data_type(t: DLDataType) -> u64 {
    u64::from(t.code) | u64::from(t.bits) << 8 | u64::from(t.lanes) << 16
}

/// One classic argument as a cell.
pub(crate) fn to_cell(a: &Args<'_>, i: usize) -> Result<TVMFFIAny> {
    Ok(match a.code(i) {
        kTVMArgInt | 1 => cell(index::INT, a.int_bits(i)? as u64),
        kTVMArgFloat => cell(index::FLOAT, a.float(i)?.to_bits()),
        kTVMNullptr => cell(index::NONE, 0),
        kTVMOpaqueHandle => cell(index::OPAQUE_PTR, a.pointer_bits(i)?),
        kTVMDataType => cell(index::DATA_TYPE, data_type(a.data_type(i)?)),
        kDLDevice => {
            let d = a.device(i)?;
            cell(index::DEVICE, (d.device_type as u32 as u64) | (d.device_id as u32 as u64) << 32)
        }
        kTVMDLTensorHandle | kTVMNDArrayHandle => cell(index::DL_TENSOR_PTR, a.pointer_bits(i)?),
        kTVMStr => cell(index::RAW_STR, a.pointer_bits(i)?),
        code => {
            return Err(Error::type_err(format!(
                "argument {i}: a {} cannot be passed to a tvm-ffi function",
                type_code_name(code)
            )))
        }
    })
}

/// A VM's borrowed argument as a cell; None for an object (the caller takes the classic way).
fn item_cell(item: &Item<'_>) -> Option<TVMFFIAny> {
    Some(match *item {
        Item::Null => cell(index::NONE, 0),
        Item::Int(i) => cell(index::INT, i as u64),
        Item::Float(x) => cell(index::FLOAT, x.to_bits()),
        Item::DataType(t) => cell(index::DATA_TYPE, data_type(t)),
        Item::Tensor(t) => cell(index::DL_TENSOR_PTR, t.tensor_ptr() as u64),
        Item::Object(_) => return None,
    })
}

/// Arguments up to this many are translated on the stack.
pub(crate) const SMALL: usize = 16;

/// Calls `f` with the classic arguments `a` as cells.
pub(crate) fn with_cells<R>(a: &Args<'_>, f: impl FnOnce(&[TVMFFIAny]) -> Result<R>) -> Result<R> {
    let mut small = [TVMFFIAny::default(); SMALL];
    let mut large = Vec::new();
    let cells: &mut [TVMFFIAny] = if a.len() <= SMALL {
        &mut small[..a.len()]
    } else {
        large.resize(a.len(), TVMFFIAny::default());
        &mut large
    };
    for (i, c) in cells.iter_mut().enumerate() {
        *c = to_cell(a, i)?;
    }
    f(cells)
}

/// Calls `f` with `args` as cells, each made of the item `item` makes of it, when every one can
/// be a cell and they are few: None otherwise (and `f` is not called).
pub(crate) fn with_lent_cells<T, R>(
    args: &[T],
    item: impl Fn(&T) -> Option<Item<'_>>,
    f: impl FnOnce(&[TVMFFIAny]) -> R,
) -> Option<R> {
    let mut small = [TVMFFIAny::default(); SMALL];
    if args.len() > SMALL {
        return None;
    }
    for (c, a) in small.iter_mut().zip(args) {
        *c = item_cell(&item(a)?)?;
    }
    Some(f(&small[..args.len()]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::ArgsBuilder;
    use crate::tensor::NDArray;

    #[test]
    fn classic_arguments_and_lent_items_make_the_same_cells() {
        let dtype = DLDataType { code: kDLFloat, bits: 16, lanes: 4 };
        let device = DLDevice { device_type: 4, device_id: 3 };
        let t = NDArray::empty(&[2, 3], DLDataType::F32, DLDevice::CPU).unwrap();
        let mut b = ArgsBuilder::new();
        b.int(-7).float(0.5).null().dtype(dtype).device(device).object(t.clone().into_any()).str("s");
        let a = b.args();
        let cells: Vec<TVMFFIAny> = (0..a.len()).map(|i| to_cell(&a, i).unwrap()).collect();
        let want = [
            (index::INT, -7i64 as u64),
            (index::FLOAT, 0.5f64.to_bits()),
            (index::NONE, 0),
            (index::DATA_TYPE, 2 | 16 << 8 | 4 << 16),
            (index::DEVICE, 4 | 3 << 32),
            (index::DL_TENSOR_PTR, t.tensor_ptr() as u64),
        ];
        for (k, (c, (i, v))) in cells.iter().zip(want).enumerate() {
            assert_eq!((c.type_index, c.value), (i, v), "argument {k}");
        }
        assert_eq!(cells[6].type_index, index::RAW_STR);
        with_cells(&a, |c| {
            assert_eq!(c.iter().map(|c| (c.type_index, c.value)).collect::<Vec<_>>(), {
                cells.iter().map(|c| (c.type_index, c.value)).collect::<Vec<_>>()
            });
            Ok(())
        })
        .unwrap();
        // The VM's items of the same values: the same cells, without the classic arrays.
        let items = [Item::Int(-7), Item::Float(0.5), Item::Null, Item::DataType(dtype), Item::Tensor(&t)];
        let lent =
            with_lent_cells(&items, |i| Some(*i), |c| c.iter().map(|c| (c.type_index, c.value)).collect::<Vec<_>>())
                .unwrap();
        let classic: Vec<_> = [0, 1, 2, 3, 5].iter().map(|&k| (cells[k].type_index, cells[k].value)).collect();
        assert_eq!(lent, classic);
        // An object has no cell of its own here: the caller takes the classic way.
        let any = t.clone().into_any();
        assert!(with_lent_cells(&[Item::Object(&any)], |i| Some(*i), |_| ()).is_none());
        assert!(with_lent_cells(&[Item::Null; 17], |i| Some(*i), |_| ()).is_none());
    }
}
