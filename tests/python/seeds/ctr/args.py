# The seed train.py's args module (not shown in the seed): --is_local.
import argparse


def parse_args():
    parser = argparse.ArgumentParser(description="CTR-DNN on Criteo-format data")
    parser.add_argument("--is_local", type=int, default=0, help="1: train locally; 0: distributed (default)")
    return parser.parse_args()
