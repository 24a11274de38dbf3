//! Device memory as the device sees it: with the runtime's OpenCL library replaced by
//! c_tests/opencl_shim.c (compiled here, selected with `TVM_RT_OPENCL_LIBRARY` before OpenCL
//! starts, so this file is a test process of its own), the live bytes of every buffer and image
//! are counted from creation to release: what a GPU would hold (pocl allocates lazily, so the
//! process's memory does not show it).

mod common;

use tvm_runtime::device::DeviceMemory;
use tvm_runtime::dlpack::DLDevice;

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };

type Bytes = unsafe extern "C" fn() -> usize;

use common::shim::shim;

fn live_bytes(lib: &libloading::Library) -> usize {
    // SAFETY: the shim's exported counter, of this signature.
    unsafe { (lib.get::<Bytes>(b"tvm_rt_cl_shim_live_bytes\0").unwrap())() }
}

/// Tests here run one at a time: they read one process-wide counter.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A device allocation, its regions and its copies: bounds refused, the regions handed out once
/// each, and every byte returned to the device when the memory goes.
#[test]
fn device_memory_regions_and_bounds() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = live_bytes(lib);
    let m = DeviceMemory::zeroed(CL, 4096).unwrap();
    assert_eq!((m.len(), m.is_empty(), m.device()), (4096, false, CL));
    assert_eq!(live_bytes(lib), before + 4096, "one buffer of the size asked");
    // Region 0 is the whole handle; others are made once and handed out again.
    assert_eq!(m.region(0, 4096).unwrap(), m.handle());
    let r = m.region(1024, 512).unwrap();
    assert_ne!(r, m.handle());
    assert_eq!(m.region(1024, 512).unwrap(), r, "the same region again");
    let r2 = m.region(1024, 256).unwrap();
    assert_ne!(r2, r, "another length is another region");
    assert!(m.owns(m.handle()) && m.owns(r) && m.owns(r2));
    let other = DeviceMemory::zeroed(CL, 64).unwrap();
    assert!(!m.owns(other.handle()) && !m.owns(std::ptr::null_mut()));
    // Bounds: nothing past the end, and no overflowing offset, refused before the device is
    // asked (a driver that does not check would write past the buffer).
    for (at, n) in [(4096, 1), (4000, 97), (usize::MAX, 2)] {
        let refused = |e: tvm_runtime::Error| e.to_string().contains("exceed 4096 bytes on the device");
        assert!(m.region(at, n).is_err_and(refused), "region {at}+{n}");
        assert!(m.write(at, &vec![0; n]).is_err_and(refused), "write {at}+{n}");
        let mut out = vec![0u8; n];
        assert!(m.read(at, &mut out).is_err_and(refused), "read {at}+{n}");
        assert!(m.duplicate_range(at, n).is_err_and(refused), "duplicate {at}+{n}");
    }
    assert_eq!(format!("{m:?}"), "DeviceMemory(4096 bytes on opencl(0))");
    let empty = DeviceMemory::zeroed(CL, 0).unwrap();
    assert!(empty.is_empty() && !m.is_empty());
    drop(empty);
    // Bytes go in and come back, at offsets.
    let data: Vec<u8> = (0..=255).collect();
    m.write(1000, &data).unwrap();
    let mut back = vec![0u8; 256];
    m.read(1000, &mut back).unwrap();
    assert_eq!(back, data);
    let mut zeros = vec![1u8; 16];
    m.read(4080, &mut zeros).unwrap();
    assert_eq!(zeros, vec![0; 16], "allocations are zeroed");
    let copy = m.duplicate_range(1000, 256).unwrap();
    let mut again = vec![0u8; 256];
    copy.read(0, &mut again).unwrap();
    assert_eq!(again, data);
    drop((m, other, copy));
    assert_eq!(live_bytes(lib), before, "every buffer released");
}

/// An executor's device memory: loading and running hold buffers; dropping the executor (and the
/// library) gives every byte back.
#[test]
fn an_executor_returns_its_device_memory() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = common::Fixture::load("opencl/mlp_unbound_cl_b1");
    let before = live_bytes(lib);
    {
        let library = f.load_lib();
        let m = f.executor_without_params_on(&library, CL);
        common::exec(&m).load_params(&f.params()).unwrap();
        f.set_inputs(&m);
        common::exec(&m).run().unwrap();
        f.check_outputs(&m, "counted");
        let params: usize = tvm_runtime::params::parse(&f.params()).unwrap().iter().map(|(_, r)| r.data.len()).sum();
        assert!(live_bytes(lib) >= before + params, "the weights are on the device");
    }
    assert_eq!(live_bytes(lib), before, "all returned (the last executor gone, parked scratch too)");
}
