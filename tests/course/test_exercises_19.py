"""Lesson 19's checkers (lessons/exercises/19.py) reject typical wrong answers, each with the reason."""
from conftest import failures, solution

REF = solution(19)


def _backward(data, forward_id):
    return [n for n in data["nodes"] if n["phase"] == "backward" and n.get("source") == forward_id]


def _in_order(ops):
    return [n["id"] for n in sorted(ops, key=lambda n: n["order"])]



def test_including_the_sums_is_rejected():
    slip = lambda data, fid: _in_order(_backward(data, fid))                                     # noqa: E731
    why = failures(19, solution(19, differentiating_ops=slip))["differentiating_ops"]
    assert "SiLU's exp" in why and "'accumulate'" in why and "differentiate nothing" in why


def test_labels_in_place_of_ids_are_rejected():
    def labels(data, fid):
        by_id = {n["id"]: n for n in data["nodes"]}
        return [by_id[i]["label"] for i in REF.differentiating_ops(data, fid)]
    why = failures(19, solution(19, differentiating_ops=labels))["differentiating_ops"]
    assert "labels" in why and "'bn140'" in why and "['permute', 'matmul', 'permute', 'matmul']" in why


def test_the_order_of_the_shuffled_nodes_is_rejected():
    slip = lambda data, fid: [n["id"] for n in _backward(data, fid) if n["origin"] != "accumulate"]   # noqa: E731
    why = failures(19, solution(19, differentiating_ops=slip))["differentiating_ops"]
    assert "order of data['nodes']" in why and "sort by `order`" in why


def test_the_reversed_order_is_rejected():
    slip = lambda data, fid: REF.differentiating_ops(data, fid)[::-1]                          # noqa: E731
    why = failures(19, solution(19, differentiating_ops=slip))["differentiating_ops"]
    assert "reversed" in why and "query projection's matmul" in why


def test_the_forward_op_itself_is_rejected():
    slip = lambda data, fid: [fid, *REF.differentiating_ops(data, fid)]                        # noqa: E731
    why = failures(19, solution(19, differentiating_ops=slip))["differentiating_ops"]
    assert "the forward op itself" in why


def test_leaving_out_the_ops_without_flops_is_rejected():
    def costly(data, fid):
        by_id = {n["id"]: n for n in data["nodes"]}
        return [i for i in REF.differentiating_ops(data, fid) if by_id[i]["flops"]]
    why = failures(19, solution(19, differentiating_ops=costly))["differentiating_ops"]
    assert "permutes and reshapes count too" in why


def test_reading_the_removed_grads_lists_fails_with_the_key():
    slip = lambda data, fid: next(n for n in data["nodes"] if n["id"] == fid)["grads"]         # noqa: E731
    assert "KeyError" in failures(19, solution(19, differentiating_ops=slip))["differentiating_ops"]


def _heaviest(key, at=lambda depth: depth, pick=lambda data, path, flops: (path, flops)):
    """heaviest_module with one slip: a different measure of a module, a different depth, or a different answer."""
    def slip(data, phase, depth):
        modules = data["modules"]
        paths = [p for p in modules if modules[p]["depth"] == at(depth)]
        best = max(paths, key=lambda p: key(data, modules[p], p, phase))
        return pick(data, best, key(data, modules[best], best, phase))
    return slip


def _flops(data, m, path, phase):
    return m["total"]["flops"][phase]


def test_matmul_flops_only_are_rejected():
    slip = _heaviest(lambda data, m, p, phase: m["total"]["matmul_flops"][phase])
    why = failures(19, solution(19, heaviest_module=slip))["heaviest_module"]
    assert "540,768" in why and "matmul FLOPs only" in why


def test_a_modules_own_ops_only_are_rejected():
    def own(data, m, path, phase):
        return sum(n["flops"] for n in data["nodes"] if n["phase"] == phase and n["path"] == path)
    why = failures(19, solution(19, heaviest_module=_heaviest(own)))["heaviest_module"]
    assert "('block.attn', 20672)" in why and "the modules inside it" in why


def test_one_layer_of_a_fold_is_rejected():
    slip = _heaviest(lambda data, m, p, phase: m["total"]["flops"][phase] // m["repeat"])
    why = failures(19, solution(19, heaviest_module=slip))["heaviest_module"]
    assert "two-layer LM" in why and "('model.lm_head', 1048576)" in why
    assert "one layer of the box layers.0–1, which stands for 2 identical layers" in why


def test_summing_the_drawn_ops_is_rejected():
    def drawn(data, phase, depth):
        flops = {}
        for n in data["nodes"]:
            if n["phase"] == phase and n["data_kind"] == "op" and len(n["scope"]) > depth:
                path = ".".join(n["scope"][:depth + 1])
                flops[path] = flops.get(path, 0) + n["flops"]
        return max(flops.items(), key=lambda kv: kv[1])
    why = failures(19, solution(19, heaviest_module=drawn))["heaviest_module"]
    assert "('model.lm_head', 1048576)" in why and "the page draws one layer's ops" in why


def test_the_other_phase_is_rejected():
    other = {"forward": "backward", "backward": "forward"}
    slip = _heaviest(lambda data, m, p, phase: m["total"]["flops"][other[phase]])
    why = failures(19, solution(19, heaviest_module=slip))["heaviest_module"]
    assert "that is the backward pass's heaviest" in why


def test_a_depth_counted_from_one_is_rejected():
    slip = _heaviest(_flops, at=lambda depth: depth + 1)
    why = failures(19, solution(19, heaviest_module=slip))["heaviest_module"]
    assert "one level too deep" in why and "depth 0 is the root" in why


def test_the_label_in_place_of_the_path_is_rejected():
    slip = _heaviest(_flops, pick=lambda data, path, flops: (data["modules"][path]["label"], flops))
    why = failures(19, solution(19, heaviest_module=slip))["heaviest_module"]
    assert "('ffn', 540768)" in why and "return the module's path ('block.ffn')" in why
