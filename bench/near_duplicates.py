"""Calibrate the near-duplicate threshold on real ShareGPT: every first-turn prompt of the first ROWS rows, rendered
with SmolLM2's template, against every other conversation's, by content 8-gram containment (`eagle3nb.heldout`).

    .venv/bin/python bench/near_duplicates.py --rows 20000 --out nbs/results/near_duplicates.json

Writes the distribution of each prompt's highest containment with another conversation's prompt (and the Jaccard of
the same pair), and a sample of pairs in each band around the threshold, with both prompts' texts cut short, for
reading. The labels read by hand live in LABELS below, keyed by the pair's two prompt ids; `--labels` only re-attaches
them to an existing file (no rendering). Nothing here trains or measures a drafter."""
import argparse, json, time
from pathlib import Path
import numpy as np

BANDS = [(0.2, 0.3), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0)]
PER_BAND = 8

# "copy": the same request (a rewording, the same text with more around it, or under another system prompt): a
# drafter scored on one after training on the other is scored on what it saw. "distinct": different requests that
# share boilerplate or a quoted passage only. Filled in by reading the sample this script prints.
LABELS = {
    'mbdj9uw_0|yIRFx5U_0': 'distinct',
    'LcaFfqI_0|u3HOkzL_0': 'distinct',
    '2i5Ouvg_0|xZtsh8M_0': 'distinct',
    'B4nEddT_30|Ir1ot4W_100': 'distinct',
    'vcxFFcO_0|2ypYvrD_0': 'distinct',
    'p5QcsLt_8|dTMQcnb_279': 'distinct',
    'fr02yt9_0|raPtTzd_0': 'distinct',
    '5qLXIDz_0|tfTHbRl_0': 'distinct',
    'jFiwfAK_0|rOVM9bg_7': 'distinct',
    '0AYfPYw_28|hIULog1_132': 'distinct',
    'or7BCnG_8|rOVM9bg_7': 'distinct',
    '0AYfPYw_104|hIULog1_132': 'distinct',
    '918G92u_0|rOVM9bg_7': 'distinct',
    'nTTR2yo_9|rOVM9bg_7': 'distinct',
    'kTvbwNb_0|rOVM9bg_7': 'distinct',
    '0AYfPYw_118|hIULog1_165': 'distinct',
    'bYTKGgl_8|QP630pA_12': 'distinct',
    'WP4UPAP_0|QKw6Z3F_0': 'distinct',
    'EEB6Fsp_7|hQsbv13_7': 'distinct',
    'Lcl15NZ_0|ffR8Af5_0': 'distinct',
    'LXj9csT_16|yZ6yXnQ_8': 'distinct',
    'TnAE0IY_6|QKw6Z3F_0': 'distinct',
    'MJSl6B1_297|jwpkTZc_219': 'copy',
    'jLBZmiw_9|puKUDTv_0': 'copy',
    'Z35PJ8x_0|QKw6Z3F_0': 'distinct',
    'NonQwo3_92|hIULog1_132': 'distinct',
    'OBcq3IS_0|1g4UvSm_0': 'distinct',
    'UyBTuTv_0|QKw6Z3F_0': 'distinct',
    'o6oiVGj_0|pMYfJjf_0': 'copy',
    'v2b1TzW_15|Qf0c1sj_9': 'distinct',
    '5hdCHod_0|QKw6Z3F_0': 'distinct',
    'r364twf_0|o8XkNcs_0': 'distinct',
    '6ELlAie_0|DDnUhPZ_9': 'distinct',
    'S1Asa9c_0|OlhSVrJ_0': 'distinct',
    'Iw6uam0_0|rkPolfx_0': 'copy',
    'CpWWk2R_0|4dGofFE_0': 'copy',
    'wb35vUi_46|fhAdpxA_10': 'copy',
    'Aynil7y_0|NHpj6AF_0': 'distinct',
    'KiXZAIk_0|A9mXTNv_26': 'copy',
    'xnkVbZz_0|JN3boIj_0': 'copy',
    '7xVv6P1_0|0njTdDE_0': 'copy',
    'g4fiAU0_69|hQsbv13_7': 'distinct',
    'MOhlKAI_0|lX1Ui49_0': 'copy',
    'VTFubr1_0|aQ0aTlO_0': 'copy',
    'MJSl6B1_372|jwpkTZc_219': 'copy',
    'evakLNh_37|hQsbv13_7': 'distinct',
    'Te6Ox0b_20|L0Eg0Tw_6': 'copy',
    'g2E74TO_0|Uc53Ex6_0': 'distinct',
    '7CszOst_0|aus2qJS_0': 'copy',
    'DojMoRu_0|0GQHxil_0': 'copy',
    'gdEYajj_0|A75vSp0_0': 'copy',
    'vm9qJHO_0|rkPolfx_0': 'copy',
    '3G3L5RF_0|zhniJbA_0': 'copy',
    'e6bkaQx_0|fjr9P2c_0': 'copy',
    'vnEgOjA_0|p4kZofZ_0': 'copy',
    'vWxRz2Y_0|OBzDCJj_0': 'copy',
    '9mJiRdo_53|lciWqqK_53': 'copy',
    'W52Zocz_37|TtyfRjD_37': 'copy',
    'Qn7CZQR_0|sgeK14m_0': 'copy',
    'ONKfO5I_31|ILFyZ5K_31': 'copy',
    'kHI3Apm_19|Mpic8gv_19': 'copy',
    'jIpJbmY_55|KVoq5tq_55': 'copy',
    'hhcioaG_1|txDxoZG_0': 'copy',
    '1r0xjBH_0|J0LUHqt_7': 'distinct',
}


def best_other(nd, ids, me:int, convs:list) -> tuple:
    "`(containment, jaccard, index)` of the prompt's best match among prompts of other conversations."
    g = nd.grams(ids)
    lo, hi = np.searchsorted(nd.keys, g, "left"), np.searchsorted(nd.keys, g, "right")
    hit = [nd.refs[a:b] for a, b in zip(lo, hi) if b > a]
    if not hit: return 0.0, 0.0, None
    shared = np.bincount(np.concatenate(hit), minlength=len(nd.sizes)).astype(float)
    shared[[j for j in np.nonzero(shared)[0] if convs[j] == convs[me]]] = 0
    c = shared / np.minimum(len(g), nd.sizes)
    j = int(c.argmax())
    return float(c[j]), float(shared[j] / (len(g) + nd.sizes[j] - shared[j])), j


def attach(out:dict) -> dict:
    "Labels onto the sample, and the counts per band and above/below each candidate threshold."
    for s in out["sample"]: s["label"] = LABELS.get(f"{s['a']}|{s['b']}")
    bands = {}
    for s in out["sample"]:
        b = bands.setdefault(s["band"], {"copy": 0, "distinct": 0, "unread": 0})
        b[s["label"] or "unread"] += 1
    out["labelled"] = bands
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--max_tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="nbs/results/near_duplicates.json")
    ap.add_argument("--labels", action="store_true", help="only re-attach LABELS to --out")
    a = ap.parse_args()
    if a.labels:
        out = attach(json.loads(Path(a.out).read_text()))
        Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        print(json.dumps(out["labelled"]))
        return
    from eagle3nb.heldout import NearDuplicates, template_pieces
    from eagle3nb.models import load_target
    from eagle3nb.prompts import (RowReader, conversation_id, first_turn, normalize_row, render_prompt,
                                  resolve_input)
    t0, tok = time.time(), load_target("smollm2").tokenizer
    pieces, recs = template_pieces(tok), []
    for where, row in RowReader(resolve_input("sharegpt")):
        if where["index"] >= a.rows: break
        try:
            conv = normalize_row(row, f"row-{where['index']}")
            ids = render_prompt(tok, first_turn(conv)[0], conv.tools)
        except Exception: continue
        if len(ids) <= a.max_tokens: recs.append((conv.id, conversation_id(row, conv), ids))
    nd = NearDuplicates([r[2] for r in recs], pieces=pieces)
    convs = [r[1] for r in recs]
    best = [best_other(nd, ids, i, convs) for i, (_, _, ids) in enumerate(recs)]
    cs = np.array([b[0] for b in best])
    edges = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9999, 1.0001]
    hist = np.histogram(cs, edges)[0].tolist()
    rng, sample = np.random.default_rng(a.seed), []
    text = lambda ids: tok.decode(ids)[:700]
    for lo, hi in BANDS:
        idx = [i for i in np.nonzero((cs > lo) & (cs <= hi))[0] if i < best[i][2]] or \
              list(np.nonzero((cs > lo) & (cs <= hi))[0])
        for i in rng.choice(idx, min(PER_BAND, len(idx)), replace=False):
            c, jac, j = best[i]
            sample.append({"band": f"{lo}-{hi}", "a": recs[i][0], "b": recs[j][0], "containment": round(c, 4),
                           "jaccard": round(jac, 4), "tokens": [len(recs[i][2]), len(recs[j][2])],
                           "text_a": text(recs[i][2]), "text_b": text(recs[j][2])})
    out = {"rows": a.rows, "prompts": len(recs), "conversations": len(set(convs)), "max_tokens": a.max_tokens,
           "tokenizer": "smollm2", "n": nd.n, "pieces": [tok.decode(p) for p in pieces],
           "best_containment_hist": {"edges": edges, "counts": hist},
           "above": {str(t): int((cs > t).sum()) for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)},
           "jaccard_above_0.5_of_those_above": {str(t): int(((cs > t) & (np.array([b[1] for b in best]) > 0.5)).sum())
                                                for t in (0.5, 0.7)},
           "seconds": round(time.time() - t0, 1), "sample": sample}
    out = attach(out)
    Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "sample"}, indent=1))


if __name__ == "__main__": main()
