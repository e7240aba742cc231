"""KV block pool of one scheduler rank: allocation, freeing, prefix-cache map and LRU eviction.

Mirrors vLLM v1 `BlockPool` / `KVCacheManager` as AISimulate models them: a request owns
ceil(tokens / block_size) blocks; every full computed block is registered under its content
hash as soon as it is scheduled (so later requests of the same pass can hit it); freed cached
blocks join an LRU list tail-first and stay matchable until evicted; unhashed blocks are freed
outright and are reused before any cached block is evicted.

Blocks are global ids `rank * B + i`; per-rank heads and counts live in RankState.
"""

import numpy as np

from aisim.kernels._jit import helper

_EMPTY = np.uint64(0)
_OWNER_ONLY = np.uint64(1)
_UNIQUE_BIT = np.uint64(1) << np.uint64(62)
_SHARED_MASK = _UNIQUE_BIT - np.uint64(1)  # shared contents keep bit 62 clear
_MIX_A = np.uint64(0x9E3779B97F4A7C15)
_MIX_B = np.uint64(0xBF58476D1CE4E5B9)
_MIX_C = np.uint64(0x94D049BB133111EB)


@helper
def mix64(x):
    """splitmix64 finaliser: a bijective 64-bit scramble."""
    z = x + _MIX_A
    z = (z ^ (z >> np.uint64(30))) * _MIX_B
    z = (z ^ (z >> np.uint64(27))) * _MIX_C
    return z ^ (z >> np.uint64(31))


@helper
def block_key(req, pfx_hash, i, j, rank):
    """Map key of block j of request i on a rank (never 0).

    Leading shareable blocks take their content from the request's prefix slice: `pfx_hash` is
    a PrefixKeys whose entry block_src[j] of the slice hashes everything up to block j (one
    entry per block for synthetic traffic, one per trace hash id for traces, whose blocks may
    be smaller or larger than the engine's), mixed with j. Every other block holds tokens no
    other conversation has, so its key is unique to (conversation, block): `owner_key`.
    """
    if j >= req.pfx_len[i]:
        return owner_key(req, i, j, rank)
    h = pfx_hash.hashes[req.pfx_start[i] + pfx_hash.block_src[j]]
    h = (mix64(h ^ mix64(np.uint64(j + 1))) & _SHARED_MASK) | _OWNER_ONLY
    return _ranked(h, rank)


@helper
def owner_key(req, i, j, rank):
    """Map key of block j of request i past its shareable prefix: unique to the conversation.
    The turns of a synthetic session extend one conversation, so they key it by its first
    request, `req.conv` (block j of every turn holds the same tokens while it lies in the
    previous turn's sequence)."""
    owner = i
    if i < req.conv.shape[0]:
        owner = req.conv[i]
    return _ranked(_UNIQUE_BIT | (np.uint64(owner) << np.uint64(24)) | np.uint64(j), rank)


@helper
def _ranked(h, rank):
    k = mix64(h ^ mix64(np.uint64(rank)))
    if k <= _OWNER_ONLY:  # 0 and 1 are reserved markers
        k = np.uint64(2)
    return k


@helper
def index(i):
    """A request, slot or block index known to be >= 0, as an unsigned number: numba indexes
    arrays with Python semantics, so every access with a signed index tests for a negative one
    and loads the array's length (a spilled stack slot inside the event loop); an unsigned
    index skips that (mtp-vllm's loop: 136 -> 116 ms). uint32, because mixing it with int64
    stays int64 (uint64 would promote to float64)."""
    return np.uint32(i)


@helper
def map_find(blocks, key):
    keys = blocks.map_keys
    mask = np.uint64(keys.shape[0] - 1)
    pos = key & mask  # unsigned: no negative-index test per probe
    while True:
        k = keys[pos]
        if k == key:
            return blocks.map_vals[pos]
        if k == _EMPTY:
            return -1
        pos = (pos + np.uint64(1)) & mask


@helper
def map_insert(blocks, key, block):
    """Cache `block` under `key`. vLLM keeps every copy of a content hash: the map holds the
    oldest copy and further copies queue behind it through dup_next (a hit takes the oldest)."""
    keys = blocks.map_keys
    mask = keys.shape[0] - 1
    pos = np.int64(key & np.uint64(mask))
    blocks.dup_next[block] = -1
    while True:
        k = keys[pos]
        if k == key:
            b = blocks.map_vals[pos]
            while blocks.dup_next[b] >= 0:
                b = blocks.dup_next[b]
            blocks.dup_next[b] = block
            return
        if k == _EMPTY:
            keys[pos] = key
            blocks.map_vals[pos] = block
            return
        pos = (pos + 1) & mask


@helper
def map_remove_block(blocks, key, block):
    """Forget one cached copy of `key` (eviction); the key leaves the map with its last copy."""
    keys = blocks.map_keys
    mask = keys.shape[0] - 1
    pos = np.int64(key & np.uint64(mask))
    while keys[pos] != key:
        pos = (pos + 1) & mask
    head = blocks.map_vals[pos]
    if head == block:
        nxt = blocks.dup_next[block]
        if nxt >= 0:
            blocks.map_vals[pos] = nxt
        else:
            map_delete(blocks, key)
    else:
        b = head
        while blocks.dup_next[b] != block:
            b = blocks.dup_next[b]
        blocks.dup_next[b] = blocks.dup_next[block]
    blocks.dup_next[block] = -1


@helper
def map_delete(blocks, key):
    """Linear-probing delete with backward shift (no tombstones)."""
    keys = blocks.map_keys
    vals = blocks.map_vals
    mask = keys.shape[0] - 1
    pos = np.int64(key & np.uint64(mask))
    while keys[pos] != key:
        if keys[pos] == _EMPTY:
            return
        pos = (pos + 1) & mask
    hole = pos
    nxt = (hole + 1) & mask
    while keys[nxt] != _EMPTY:
        home = np.int64(keys[nxt] & np.uint64(mask))
        # move the entry back if its home is not in the cyclic range (hole, nxt]
        if (nxt > hole and (home <= hole or home > nxt)) or (
            nxt < hole and (home <= hole and home > nxt)
        ):
            keys[hole] = keys[nxt]
            vals[hole] = vals[nxt]
            hole = nxt
        nxt = (nxt + 1) & mask
    keys[hole] = _EMPTY
    vals[hole] = -1


@helper
def lru_unlink(ranks, blocks, r, b):
    p = blocks.lru_prev[b]
    n = blocks.lru_next[b]
    if p >= 0:
        blocks.lru_next[p] = n
    else:
        ranks.lru_head[r] = n
    if n >= 0:
        blocks.lru_prev[n] = p
    else:
        ranks.lru_tail[r] = p
    blocks.lru_prev[b] = -1
    blocks.lru_next[b] = -1
    ranks.lru_len[r] -= 1


@helper
def lru_append(ranks, blocks, r, b):
    t = ranks.lru_tail[r]
    blocks.lru_prev[b] = t
    blocks.lru_next[b] = -1
    if t >= 0:
        blocks.lru_next[t] = b
    else:
        ranks.lru_head[r] = b
    ranks.lru_tail[r] = b
    ranks.lru_len[r] += 1


@helper
def num_free(ranks, r):
    """Blocks a rank can hand out: unhashed free plus evictable cached blocks."""
    return ranks.clean_top[r] + ranks.lru_len[r]


@helper
def take_block(ranks, blocks, r, num_blocks):
    """Pop a free block (clean first, else evict the LRU head) and reference it once."""
    top = ranks.clean_top[r]
    if top > 0:
        b = blocks.clean_stack[r * num_blocks + top - 1]
        ranks.clean_top[r] = top - 1
    else:
        b = evict_lru_head(ranks, blocks, r)
    blocks.ref[b] = 1
    ranks.num_referenced[r] += 1
    return b


@helper
def evict_lru_head(ranks, blocks, r):
    """Unlink the least recently released cached block and forget its contents."""
    b = ranks.lru_head[r]
    lru_unlink(ranks, blocks, r, b)
    if blocks.in_map[b]:
        map_remove_block(blocks, blocks.hash[b], b)
        blocks.in_map[b] = False
        ranks.lru_live[r] -= 1
    blocks.hash[b] = _EMPTY
    return b


@helper
def evict_to_clean(ranks, blocks, r, count, num_blocks):
    """Evict LRU blocks until `count` unhashed free blocks exist (caller checked num_free).

    A block reservation takes free capacity first and evicts only for the rest; blocks it does
    not use return as plain free capacity, their cached contents lost."""
    top = ranks.clean_top[r]
    while top < count:
        blocks.clean_stack[r * num_blocks + top] = evict_lru_head(ranks, blocks, r)
        top += 1
    ranks.clean_top[r] = top


@helper
def grow_slot(ranks, blocks, r, slot, target_blocks, num_blocks):
    """Append blocks to a table row until it holds target_blocks (caller checked num_free)."""
    n = blocks.slot_nblk[slot]
    while n < target_blocks:
        blocks.slot_blocks[slot, n] = take_block(ranks, blocks, r, num_blocks)
        n += 1
    blocks.slot_nblk[slot] = n


@helper
def ref_hit_block(ranks, blocks, r, b):
    if blocks.ref[b] == 0:
        lru_unlink(ranks, blocks, r, b)
        ranks.lru_live[r] -= 1  # only blocks in the map can be hit
        ranks.num_referenced[r] += 1
    blocks.ref[b] += 1


@helper
def register_full_blocks(req, blocks, pfx_hash, i, r, slot, num_computed, block_size):
    """Cache every block of request i that is now full of computed tokens.

    Shareable blocks enter the hash map at once (later requests of this very pass may hit
    them). A block no other request can share is only marked cached (it still ages in the LRU
    like any cached block); its key enters the map if its owner is preempted, the only way it
    can ever be hit. This keeps the map off the per-block path of unshared traffic.
    """
    full = num_computed // block_size
    j = blocks.slot_nhashed[slot]
    n_shared = req.pfx_len[i]
    while j < full:
        b = blocks.slot_blocks[slot, j]
        if blocks.hash[b] == _EMPTY:
            if j < n_shared:
                key = block_key(req, pfx_hash, i, j, r)
                map_insert(blocks, key, b)
                blocks.hash[b] = key
                blocks.in_map[b] = True
            else:
                blocks.hash[b] = _OWNER_ONLY
        j += 1
    if full > blocks.slot_nhashed[slot]:
        blocks.slot_nhashed[slot] = full


@helper
def publish_owner_blocks(req, blocks, i, r, slot):
    """Before request i is preempted, or completes with a next turn to come: put its
    owner-only cached blocks into the map."""
    for j in range(req.pfx_len[i], blocks.slot_nhashed[slot]):
        b = blocks.slot_blocks[slot, j]
        if blocks.hash[b] == _OWNER_ONLY:
            key = owner_key(req, i, j, r)
            map_insert(blocks, key, b)
            blocks.hash[b] = key
            blocks.in_map[b] = True


@helper
def release_slot(ranks, blocks, r, slot, num_blocks):
    """Drop a request's references tail-first; cached blocks become evictable (LRU tail)."""
    n = blocks.slot_nblk[slot]
    for jj in range(n - 1, -1, -1):
        b = index(blocks.slot_blocks[slot, jj])
        blocks.slot_blocks[slot, jj] = -1
        blocks.ref[b] -= 1
        if blocks.ref[b] == 0:
            ranks.num_referenced[r] -= 1
            # A cached block only its finished owner could hit is dead weight. While no block
            # anyone can hit waits in the LRU, dead blocks are freed outright: every one of them
            # would be evicted before any live block appended later, exactly as via the LRU.
            if blocks.in_map[b]:
                lru_append(ranks, blocks, r, b)
                ranks.lru_live[r] += 1
            elif blocks.hash[b] != _EMPTY and ranks.lru_live[r] > 0:
                lru_append(ranks, blocks, r, b)
            else:
                blocks.hash[b] = _EMPTY
                top = ranks.clean_top[r]
                blocks.clean_stack[r * num_blocks + top] = b
                ranks.clean_top[r] = top + 1
    blocks.slot_nblk[slot] = 0
    blocks.slot_nhashed[slot] = 0


@helper
def probe_prefix(req, blocks, pfx_hash, i, r, known_tokens, block_size, enabled, whole_prompt):
    """Leading cached blocks of request i's known sequence, capped so one token is computed.

    Returns (hit_blocks, active_hit_blocks): active hits are held by a live request. Each block
    is looked up in its oldest cached copy (cached_copy), on every pool alike."""
    if not enabled:
        return 0, 0
    # vLLM always recomputes the last token; TRT-LLM can reuse a whole block-aligned prompt
    cap = known_tokens // block_size if whole_prompt else (known_tokens - 1) // block_size
    hits = 0
    active = 0
    while hits < cap:
        b = cached_copy(blocks, block_key(req, pfx_hash, i, hits, r))
        if b < 0:
            break
        if blocks.ref[b] > 0:
            active += 1
        hits += 1
    return hits, active


@helper
def attach_hits(req, ranks, blocks, pfx_hash, i, r, slot, hits):
    """Reference the first `hits` cached blocks of request i (the copies probe_prefix found) as
    its leading table entries."""
    for j in range(hits):
        b = cached_copy(blocks, block_key(req, pfx_hash, i, j, r))
        ref_hit_block(ranks, blocks, r, b)
        blocks.slot_blocks[slot, j] = b
    blocks.slot_nblk[slot] = hits
    blocks.slot_nhashed[slot] = hits


@helper
def cached_copy(blocks, key):
    """The oldest surviving cached copy of `key`, -1 if none. vLLM keeps every copy of a content
    hash (map_insert); the map holds the oldest and the others queue behind it, promoted in turn
    when it is evicted."""
    return map_find(blocks, key)
