//! A library's module blob (its graph, its embedded weights) is given back to the page cache once
//! parsed: a model whose weights come from a prepared file, or were copied out of the blob, holds
//! no resident pages of them in the library's mapping (a Triton instance of ResNet-18 held 45 MB).

mod common;

use common::*;
use tvm_runtime::library::LibraryModule;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;

/// How many of the pages wholly inside `bytes` this process has mapped (present in its page
/// tables, /proc/self/pagemap's bit 63), of how many. (mincore would say whether the file's pages
/// are in the page cache, which they stay: what the process holds is the question.)
fn resident_pages(bytes: &[u8]) -> (usize, usize) {
    use std::io::{Read, Seek, SeekFrom};
    // SAFETY: sysconf reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    let n = end.saturating_sub(start) / page;
    if n == 0 {
        return (0, 0);
    }
    let mut map = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
    map.seek(SeekFrom::Start((start / page * 8) as u64)).unwrap();
    let mut entries = vec![0u8; n * 8];
    map.read_exact(&mut entries).unwrap();
    let present = entries.chunks(8).filter(|e| u64::from_le_bytes((*e).try_into().unwrap()) >> 63 == 1).count();
    (present, n)
}

/// The operator library in a loaded module tree (its root, or an import at any depth).
fn library_of(m: &ObjRef<Module>) -> Option<ObjRef<Module>> {
    if m.node::<LibraryModule>().is_some() {
        return Some(m.clone());
    }
    m.imports().iter().find_map(library_of)
}

#[test]
fn a_parsed_module_blob_holds_no_resident_pages_and_reads_the_same_after() {
    tvm_runtime::init();
    for name in ["mlp_b1", "convnet", "mlp_fp16"] {
        let root = Fixture::load(name).load_lib();
        let lib = library_of(&root).expect("an operator library in the tree");
        let bytes = lib.node::<LibraryModule>().expect("the operator library").module_blob().expect("a module blob");
        let (resident, pages) = resident_pages(bytes);
        assert!(pages > 0, "{name}: a blob of {} bytes spans no whole page", bytes.len());
        assert_eq!(resident, 0, "{name}: {resident} of the blob's {pages} pages resident after loading");
        // Touched again, they read the file's bytes: the same model loads from them.
        let sum: u64 = bytes.iter().map(|&b| u64::from(b)).sum();
        assert!(sum > 0);
        assert!(resident_pages(bytes).0 > 0);
        Fixture::load(name).load_lib();
    }
}
