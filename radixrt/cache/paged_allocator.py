"""PagedSlotAllocator: KV slots handed out in whole pages of `page_size` consecutive slots.

Page p holds slots p*P .. p*P+P-1 (P = page_size); page 0 is the pool's padding page and never
allocated, so the usable slots are P .. capacity+P-1. A request's token t always sits at
offset t % P of its page: a fresh request starts on a fresh page, a prefix cache matched in
whole pages hands over whole pages, and each extension first fills the request's partly used
last page (the slots after its token kv_len-1) before it takes new pages.

Ownership is by page. Whoever holds a page owns all of its P slots, used or not; `free` takes
any slots and gives back the pages they lie in, so a caller frees a page exactly once, when it
no longer needs any of its slots (a request's partial last page at release; the cache's
evicted nodes, which are whole pages). `num_free` counts slots: free pages times P.
"""

from __future__ import annotations

import torch

from radixrt.cache.memory_pool import OutOfSlotsError, TokenSlotAllocator


class PagedSlotAllocator(TokenSlotAllocator):
    """Free list of pages 1..capacity/page_size over a pool laid out by TokenToKVPool."""

    def __init__(self, capacity: int, page_size: int, device: torch.device | str = "cpu") -> None:
        if page_size < 2 or capacity < page_size or capacity % page_size:
            raise ValueError(
                f"a paged allocator needs page_size >= 2 and a capacity that is a positive "
                f"multiple of it; got capacity {capacity}, page_size {page_size}"
            )
        self.page_size = page_size
        super().__init__(capacity, device)

    def clear(self) -> None:
        # (num_free_pages,) int64 page ids on the pool's device; order is allocation order.
        num_pages = self.capacity // self.page_size
        self.free_pages = torch.arange(1, num_pages + 1, dtype=torch.int64, device=self.device)

    @property
    def num_free(self) -> int:
        return int(self.free_pages.numel()) * self.page_size

    @property
    def free_slots(self) -> torch.Tensor:
        """(num_free,) int64: every slot of every free page."""
        return self._page_slots(self.free_pages)

    @property
    def max_slot(self) -> int:
        return self.capacity + self.page_size - 1

    def slots_needed(self, kv_len: int, n: int) -> int:
        """Slots of the new pages that n more tokens after kv_len held ones take."""
        p = self.page_size
        return (-(-(kv_len + n) // p) - -(-kv_len // p)) * p

    def alloc(self, n: int) -> torch.Tensor:
        """(n,) int64 slots for a request starting on a fresh page: ceil(n/P) whole pages,
        the last one's unused slots owned by the caller too."""
        return self.alloc_extend([0], [n], None)

    def alloc_extend(
        self, kv_lens: list[int], extend_lens: list[int], last_slots: torch.Tensor | None
    ) -> torch.Tensor:
        """Slots for each request's next extend_lens[b] tokens, in batch order: (T,) int64.

        Request b first fills its last page (slots last_slots[b]+1, ... up to the page's end;
        last_slots (B,) is read only where kv_lens[b] % P != 0), then takes new pages.
        """
        p = self.page_size
        fill = [min(e, -k % p) for k, e in zip(kv_lens, extend_lens, strict=True)]
        pages = [-(-(e - f) // p) for e, f in zip(extend_lens, fill)]
        num_pages = sum(pages)
        if num_pages > self.free_pages.numel():
            raise OutOfSlotsError(
                f"asked for {num_pages * p} KV slots ({num_pages} pages of {p}) but only "
                f"{self.num_free} are free"
            )
        new_slots = self._page_slots(self.free_pages[:num_pages])  # (num_pages*P,)
        self.free_pages = self.free_pages[num_pages:]
        total = sum(extend_lens)
        if total == 0:
            return new_slots[:0]
        dev = self.device
        lens = torch.tensor(extend_lens, device=dev)
        req = torch.repeat_interleave(torch.arange(len(lens), device=dev), lens, output_size=total)
        first = torch.cumsum(lens, 0) - lens  # (B,) each request's first token in the output
        j = torch.arange(total, device=dev) - first[req]  # (T,) token index within its request
        fill_t = torch.tensor(fill, device=dev)[req]  # (T,)
        pages_t = torch.tensor(pages, device=dev)
        page_base = (torch.cumsum(pages_t, 0) - pages_t) * p  # (B,) first new slot in new_slots
        # Tokens past the fill take new_slots in order; the others read a clamped dummy index.
        k = (page_base[req] + j - fill_t).clamp(0, max(num_pages * p - 1, 0))
        out = new_slots[k] if num_pages else torch.zeros(total, dtype=torch.int64, device=dev)
        if any(fill):
            if last_slots is None:
                raise ValueError("extending a partly used page needs each request's last slot")
            last = last_slots.to(dev, torch.int64)[req]
            out = torch.where(j < fill_t, last + 1 + j, out)
        return out

    def free(self, slots: torch.Tensor) -> None:
        """Give back the pages `slots` lie in; the caller owned all of each page."""
        if slots.numel() == 0:
            return
        pages = torch.unique(slots.to(self.device, torch.int64) // self.page_size)
        self.free_pages = torch.cat([self.free_pages, pages])

    def _page_slots(self, pages: torch.Tensor) -> torch.Tensor:
        """(n*P,) int64: the slots of pages (n,), page by page."""
        p = self.page_size
        return (pages[:, None] * p + torch.arange(p, device=pages.device)).reshape(-1)
