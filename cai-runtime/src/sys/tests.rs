//! Tests of `sys`.

use super::binary_extent;

/// A 64-bit little-endian ELF header with one section of `size` bytes at `offset`
/// (section headers right after the header), `extra` bytes after the headers.
fn elf(offset: u64, size: u64, extra: usize) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
    b[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    b[60..62].copy_from_slice(&1u16.to_le_bytes()); // e_shnum
    let mut sh = vec![0u8; 64];
    sh[4..8].copy_from_slice(&1u32.to_le_bytes()); // SHT_PROGBITS
    sh[24..32].copy_from_slice(&offset.to_le_bytes());
    sh[32..40].copy_from_slice(&size.to_le_bytes());
    b.extend(sh);
    b.extend(vec![7u8; extra]);
    b
}

#[test]
fn a_binary_image_must_hold_what_its_headers_name() {
    assert_eq!(binary_extent(&elf(128, 16, 16)), Some(Ok(())));
    // A section past the end, a cut section table, a cut header, overflowing fields.
    assert!(matches!(binary_extent(&elf(128, 17, 16)), Some(Err(_))));
    assert!(matches!(binary_extent(&elf(128, 16, 16)[..100]), Some(Err(_))));
    assert!(matches!(binary_extent(&elf(128, 16, 16)[..40]), Some(Err(_))));
    assert!(matches!(binary_extent(&elf(u64::MAX, 2, 16)), Some(Err(_))));
    // A 32-bit ELF file is no CUBIN.
    let mut e32 = elf(128, 16, 16);
    e32[4] = 1;
    assert!(matches!(binary_extent(&e32), Some(Err(_))));
    // Extended numbering (a table with a count of 0), a section-name index past the
    // table, a string table without its NUL.
    let mut extended = elf(128, 16, 16);
    extended[60..62].copy_from_slice(&0u16.to_le_bytes());
    assert!(matches!(binary_extent(&extended), Some(Err(_))));
    let mut names = elf(128, 16, 16);
    names[62..64].copy_from_slice(&9u16.to_le_bytes());
    assert!(matches!(binary_extent(&names), Some(Err(_))));
    let mut strtab = elf(128, 16, 16);
    strtab[64 + 4..64 + 8].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(binary_extent(&strtab), Some(Err(_))));
    strtab[128 + 15] = 0;
    assert_eq!(binary_extent(&strtab), Some(Ok(())));
    // A fatbinary is not checked here: it is handed over copied, as any non-ELF image.
    assert_eq!(binary_extent(&0xBA55_ED50u32.to_le_bytes()), None);
    // PTX is text: not a binary image.
    assert_eq!(binary_extent(b".version 8.0\n.target sm_90\n"), None);
}

/// Any bytes, after the ELF magic or not: an answer, never a panic; and an ELF image it accepts
/// holds its section table (what the driver reads first).
#[test]
fn any_bytes_get_an_answer() {
    use proptest::prelude::*;
    let header = prop_oneof![Just(b"\x7fELF".to_vec()), Just(Vec::new())];
    // Mostly small fields (offsets and counts near the image's size), sometimes any.
    let body = proptest::collection::vec(prop_oneof![4 => 0u8..=4, 1 => any::<u8>()], 0..400);
    proptest!(|(head in header, mut body in body, elf64 in any::<bool>())| {
        if elf64 && body.len() >= 2 && head.len() == 4 && head[0] == 0x7f {
            body[0] = 2;
            body[1] = 1;
        }
        let image: Vec<u8> = head.iter().chain(&body).copied().collect();
        if let Some(Ok(())) = binary_extent(&image) {
            if image.starts_with(b"\x7fELF") {
                let u = |at: usize, n: usize| image[at..at + n].iter().rev().fold(0u64, |v, &x| v << 8 | x as u64);
                prop_assert!(u(40, 8) + u(58, 2) * u(60, 2) <= image.len() as u64);
            }
        }
    });
}
