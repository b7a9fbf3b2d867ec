"""fa.mods.contents_epoch (the fa_mods.mask_epoch Python passes, which keys the library's classification cache) on
tensor stand-ins, no GPU or torch needed: the same tensor at the same version keeps its epoch; a new version, a new
tensor at the same address (the caching allocator's reuse), forget_contents (Mods.changed) or any changed buffer of
several give an epoch never given before; no buffer gives 1; a tensor without a version counter (an inference
tensor) gives 0, which turns the cache off for that call."""

import gc

from fa import mods as M


class FakeTensor:
    """What contents_epoch reads of a torch tensor: data_ptr() and _version."""

    def __init__(self, ptr, version=0):
        self.ptr, self._version = ptr, version

    def data_ptr(self):
        return self.ptr


class InferenceTensor(FakeTensor):
    @property
    def _version(self):
        raise RuntimeError("Inference tensors do not track version counter")

    @_version.setter
    def _version(self, _value):
        pass


def test_same_tensor_same_version_keeps_its_epoch():
    t = FakeTensor(0x7000)
    e = M.contents_epoch([t])
    assert e >= 2
    assert M.contents_epoch([t]) == e
    assert M.contents_epoch([t, None]) == e, "None entries (absent offsets) are skipped"


def test_any_change_gives_an_epoch_never_given_before():
    a, b = FakeTensor(0x8000), FakeTensor(0x9000)
    seen = {M.contents_epoch([a, b])}
    a._version += 1  # an in-place write
    e = M.contents_epoch([a, b])
    assert e not in seen
    seen.add(e)
    assert M.contents_epoch([a, b]) == e
    b._version += 1
    e = M.contents_epoch([a, b])
    assert e not in seen
    seen.add(e)
    c = FakeTensor(0x8000, version=a._version)  # another tensor at a's address and version
    e = M.contents_epoch([c, b])
    assert e not in seen
    seen.add(e)
    M.forget_contents([b])  # written behind the version counter
    e = M.contents_epoch([c, b])
    assert e not in seen


def test_a_freed_tensor_reallocated_at_its_address_is_new():
    t = FakeTensor(0xA000)
    e = M.contents_epoch([t])
    del t
    gc.collect()
    u = FakeTensor(0xA000)  # same address, same version 0: only its identity differs
    assert M.contents_epoch([u]) != e


def test_no_buffers_and_inference_tensors():
    assert M.contents_epoch([]) == 1
    assert M.contents_epoch([None, None]) == 1
    assert M.contents_epoch([FakeTensor(0xB000), InferenceTensor(0xC000)]) == 0


def test_the_table_stays_bounded():
    keep = [FakeTensor(0x100000 + 256 * n) for n in range(M._EPOCHS_MAX + 10)]
    for t in keep:
        M.contents_epoch([t])
    assert len(M._EPOCHS) <= M._EPOCHS_MAX
    e = M.contents_epoch([keep[0]])
    assert M.contents_epoch([keep[0]]) == e
