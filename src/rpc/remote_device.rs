//! Devices of RPC sessions (`type + 128 * (session + 1)`) behind the device layer's one trait:
//! arrays there are memory of the server. An array's `data` is the address of a record this file
//! makes (the remote pointer, the session, and whether the memory is an allocation or an array the
//! server returned), which only this file reads; the records are the unsafe part of the client.

use super::packet::code;
use super::session::{self, ClientSession};
use super::wire::{Value, WireTensor};
use crate::device::{Attr, DeviceApi, Place};
use crate::dlpack::{kDLUInt, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::{Buffer, NDArray};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What a remote array's `data` points at.
struct Record {
    session: Arc<ClientSession>,
    remote: u64,
    /// The handle of the array the server returned (freed with `FreeHandle`); `None` for memory
    /// this client allocated (freed with `DevFreeData`).
    array: Option<u64>,
}

/// The record behind `data`, a handle of this API.
///
/// # Safety
/// `data` must come from `into_handle` and not be freed.
unsafe fn borrow<'a>(data: *mut c_void) -> Result<&'a Record> {
    // SAFETY: the caller's promise.
    unsafe { data.cast::<Record>().as_ref() }.ok_or_else(|| Error::value("RPC: a remote array without memory"))
}

fn into_handle(r: Record) -> *mut c_void {
    Box::into_raw(Box::new(r)).cast()
}

/// The remote pointer of a remote array's `data`.
pub fn remote_pointer(data: *mut c_void, device: DLDevice) -> Result<u64> {
    if !crate::device::is_remote(device) {
        return Err(Error::value("Can not pass in local array to a remote function"));
    }
    // SAFETY: the data of an array on a remote device is a record of this API: arrays there are
    // made only by it (allocations, returned arrays), as `DLTensor.data` of upstream's RPC
    // arrays is its own record.
    Ok(unsafe { borrow(data) }?.remote)
}

/// A local array standing for the array the server returned (`handle`), on this session's device.
pub fn remote_array(session: &Arc<ClientSession>, t: &WireTensor, handle: u64) -> Result<ObjRef<NDArray>> {
    let device = DLDevice { device_type: session.masked(t.device.device_type), device_id: t.device.device_id };
    let n = t.nbytes()?;
    let data = into_handle(Record { session: session.clone(), remote: t.data, array: Some(handle) });
    // SAFETY: a handle of this API just made, owned by the memory from now on (freed through it).
    let mem = unsafe { crate::device::DeviceMemory::adopt(device, data, n) };
    let mem = match mem {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: made above, handed to nobody.
            drop(unsafe { Box::from_raw(data.cast::<Record>()) });
            return Err(e);
        }
    };
    let buffer = Arc::new(Buffer::on_device(mem)?);
    let array = NDArray::view_of(&buffer, 0, &t.shape, t.dtype)?;
    if t.byte_offset != 0 {
        return Err(Error::tvm("RPC: a returned array with a byte offset"));
    }
    Ok(array)
}

/// The API of one masked device type.
struct RemoteDevice {
    device_type: i32,
}

/// The API of masked device type `t` (made once per type).
pub fn api(t: i32) -> Result<&'static dyn DeviceApi> {
    static APIS: Mutex<Option<HashMap<i32, &'static RemoteDevice>>> = Mutex::new(None);
    let mut apis = APIS.lock().unwrap_or_else(|e| e.into_inner());
    let api = *apis
        .get_or_insert_with(HashMap::new)
        .entry(t)
        .or_insert_with(|| Box::leak(Box::new(RemoteDevice { device_type: t })));
    Ok(api)
}

impl RemoteDevice {
    fn session(&self) -> Result<Arc<ClientSession>> {
        session::session((self.device_type / crate::device::RPC_SESS_MASK - 1) as usize)
    }

    fn remote(&self, id: i32) -> DLDevice {
        DLDevice { device_type: self.device_type % crate::device::RPC_SESS_MASK, device_id: id }
    }

    /// A flat byte tensor over `n` bytes of a record's memory from `offset`, as copies send it.
    fn bytes_at(&self, r: &Record, device: DLDevice, offset: usize, n: usize) -> WireTensor {
        WireTensor {
            data: r.remote,
            device: DLDevice { device_type: device.device_type % crate::device::RPC_SESS_MASK, ..device },
            dtype: DLDataType { code: kDLUInt, bits: 8, lanes: 1 },
            shape: vec![n as i64],
            byte_offset: offset as u64,
        }
    }
}

impl DeviceApi for RemoteDevice {
    fn name(&self) -> &'static str {
        "rpc"
    }

    /// The server knows its devices; any id is tried there.
    fn count(&self) -> Result<usize> {
        Ok(i32::MAX as usize)
    }

    fn attr(&self, id: i32, kind: i32) -> Result<Option<Attr>> {
        let s = self.session()?;
        Ok(match s.syscall(code::DEV_GET_ATTR, vec![Value::Device(self.remote(id)), Value::Int(kind as i64)])? {
            Value::Int(v) => Some(Attr::Int(v)),
            Value::Str(v) => Some(Attr::Str(v)),
            _ => None,
        })
    }

    fn set_device(&self, id: i32) -> Result<()> {
        self.session()?.syscall(code::DEV_SET_DEVICE, vec![Value::Device(self.remote(id))]).map(|_| ())
    }

    fn alloc(&self, id: i32, nbytes: usize, alignment: usize) -> Result<*mut c_void> {
        let session = self.session()?;
        let args = vec![
            Value::Device(self.remote(id)),
            Value::Int(nbytes as i64),
            Value::Int(alignment as i64),
            Value::DataType(DLDataType { code: kDLUInt, bits: 8, lanes: 1 }),
        ];
        match session.syscall(code::DEV_ALLOC_DATA, args)? {
            Value::Handle(remote) => Ok(into_handle(Record { session, remote, array: None })),
            other => Err(Error::tvm(format!("RPC: DevAllocData answered {other:?}"))),
        }
    }

    unsafe fn free(&self, id: i32, data: *mut c_void) -> Result<()> {
        if data.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's promise: a handle of this API, freed once.
        let r = unsafe { Box::from_raw(data.cast::<Record>()) };
        match r.array {
            Some(h) => {
                r.session.free_handle(h, crate::dlpack::kTVMNDArrayHandle);
                Ok(())
            }
            None => r
                .session
                .syscall(code::DEV_FREE_DATA, vec![Value::Device(self.remote(id)), Value::Handle(r.remote)])
                .map(|_| ()),
        }
    }

    fn region_alignment(&self, _: i32) -> Result<usize> {
        Ok(crate::tensor::ALIGNMENT)
    }

    unsafe fn region(&self, _: i32, _: *mut c_void, _: usize, _: usize) -> Result<*mut c_void> {
        Err(Error::value("RPC devices do not hand out regions of their memory"))
    }

    unsafe fn copy(&self, from: Place, to: Place, nbytes: usize) -> Result<()> {
        let remote_from = crate::device::is_remote(from.device);
        let remote_to = crate::device::is_remote(to.device);
        match (remote_from, remote_to) {
            (false, true) => {
                // SAFETY: the caller's promise: `to` is a handle of this API.
                let r = unsafe { borrow(to.data) }?;
                // SAFETY: the caller's promise: `from` addresses `nbytes` host bytes from its offset.
                let bytes = unsafe { std::slice::from_raw_parts(from.data.cast::<u8>().add(from.offset), nbytes) };
                r.session.copy_to_remote(&self.bytes_at(r, to.device, to.offset, nbytes), bytes)
            }
            (true, false) => {
                // SAFETY: the caller's promise: `from` is a handle of this API.
                let r = unsafe { borrow(from.data) }?;
                // SAFETY: the caller's promise: `to` addresses `nbytes` writable host bytes.
                let out = unsafe { std::slice::from_raw_parts_mut(to.data.cast::<u8>().add(to.offset), nbytes) };
                r.session.copy_from_remote(&self.bytes_at(r, from.device, from.offset, nbytes), out)
            }
            (true, true) => {
                // SAFETY: both handles of remote APIs (the caller's promise).
                let (a, b) = unsafe { (borrow(from.data)?, borrow(to.data)?) };
                if !Arc::ptr_eq(&a.session, &b.session) {
                    return Err(Error::value("Can not copy across different RPC sessions"));
                }
                let args = vec![
                    Value::Tensor(self.bytes_at(a, from.device, from.offset, nbytes)),
                    Value::Tensor(self.bytes_at(b, to.device, to.offset, nbytes)),
                    Value::Handle(0),
                ];
                a.session.syscall(code::COPY_AMONG_REMOTE, args).map(|_| ())
            }
            (false, false) => Err(Error::internal("a copy between host memories reached the RPC device")),
        }
    }

    fn sync(&self, id: i32) -> Result<()> {
        self.sync_stream(id, std::ptr::null_mut())
    }

    // Streams live on the server (its thread serving this session has the current one); a handle
    // here is the server's, passed back as it came.

    fn create_stream(&self, id: i32) -> Result<*mut c_void> {
        match self.session()?.syscall(code::DEV_CREATE_STREAM, vec![Value::Device(self.remote(id))])? {
            Value::Handle(h) => Ok(h as usize as *mut c_void),
            Value::Null => Ok(std::ptr::null_mut()),
            other => Err(Error::tvm(format!("RPC: DevCreateStream answered {other:?}"))),
        }
    }

    fn free_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        let args = vec![Value::Device(self.remote(id)), Value::Handle(stream as usize as u64)];
        self.session()?.syscall(code::DEV_FREE_STREAM, args).map(|_| ())
    }

    fn set_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        let args = vec![Value::Device(self.remote(id)), Value::Handle(stream as usize as u64)];
        self.session()?.syscall(code::DEV_SET_STREAM, args).map(|_| ())
    }

    fn sync_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        let args = vec![Value::Device(self.remote(id)), Value::Handle(stream as usize as u64)];
        self.session()?.syscall(code::DEV_STREAM_SYNC, args).map(|_| ())
    }

    /// The protocol has no call for it: `to` is ordered after `from` by waiting for `from`, as
    /// upstream's default does.
    fn sync_stream_from_to(&self, id: i32, from: *mut c_void, _to: *mut c_void) -> Result<()> {
        self.sync_stream(id, from)
    }

    fn alloc_workspace(&self, _: i32, _: usize) -> Result<*mut c_void> {
        Err(Error::value("kernels do not run on RPC devices here: they run on the server"))
    }

    fn free_workspace(&self, _: i32, _: *mut c_void) -> Result<()> {
        Err(Error::value("kernels do not run on RPC devices here: they run on the server"))
    }
}
