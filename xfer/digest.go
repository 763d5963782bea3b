package xfer

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Checksums. A block's digest is XXH64 (seed 0) of its bytes; a file's
// digest is XXH64 of its size (u64 big-endian) followed by the digests of
// all its blocks in order (u64 big-endian each). Both ends compute them
// while the data flows: the sender from what it reads, the receiver from
// what it received or kept, so a file whose digests agree holds what the
// sender read, block by block, with nothing missing, moved or left over.
//
// XXH64 guards against bugs and corruption (disks, memory, a broken
// middlebox on a plain link), not against an adversary: TLS authenticates
// the data in transit, and authenticated-plain links trade that away on
// request. It hashes at memory speed, so checking costs no throughput.

// blockDigest is a block's digest.
func blockDigest(b []byte) uint64 { return xxhash.Sum64(b) }

// fileDigest is a file's digest from its size and its block digests.
func fileDigest(size uint64, blocks []uint64) uint64 {
	h := xxhash.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], size)
	_, _ = h.Write(b[:])
	for _, d := range blocks {
		binary.BigEndian.PutUint64(b[:], d)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// DefaultBlock is the block size of files up to DefaultBlock*maxBlocks
// bytes (128 GiB); larger files use larger blocks (see blockSize).
const DefaultBlock = 1 << 20

// blockSize is the block size for a file of size bytes: DefaultBlock,
// doubled until the file has at most maxBlocks blocks; 0 if the file is
// too large even for MaxBlock.
func blockSize(size int64) uint32 {
	b := int64(DefaultBlock)
	for (size+b-1)/b > maxBlocks {
		if b *= 2; b > MaxBlock {
			return 0
		}
	}
	return uint32(b)
}

// blocks is the number of blocks of a file.
func blocks(size uint64, block uint32) int {
	return int((size + uint64(block) - 1) / uint64(block))
}
