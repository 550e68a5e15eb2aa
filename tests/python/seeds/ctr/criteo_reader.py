# The seed train.py's pipe_command (not shown in the seed): Paddle's criteo_reader.py,
# Criteo lines on stdin -> MultiSlot lines on stdout.  Paddle's hashes the categorical
# values with Python's hash(), which differs from process to process on Python 3; this one
# uses crc32 so every file and epoch maps a value to the same id.
import sys
import zlib

import fleet_c.distributed.fleet.data_generator as dg

cont_min_ = [0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
cont_diff_ = [20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50]
hash_dim_ = int(sys.argv[1])
continuous_range_ = range(1, 14)
categorical_range_ = range(14, 40)


class CriteoDataset(dg.MultiSlotDataGenerator):
    def generate_sample(self, line):
        def reader():
            features = line.rstrip('\n').split('\t')
            dense_feature = []
            sparse_feature = []
            for idx in continuous_range_:
                if features[idx] == "":
                    dense_feature.append(0.0)
                else:
                    dense_feature.append((float(features[idx]) - cont_min_[idx - 1]) / cont_diff_[idx - 1])
            for idx in categorical_range_:
                sparse_feature.append([zlib.crc32((str(idx) + features[idx]).encode()) % hash_dim_])
            label = [int(features[0])]
            feature_name = ["dense_input"]
            for idx in categorical_range_:
                feature_name.append("C" + str(idx - 13))
            feature_name.append("label")
            yield list(zip(feature_name, [dense_feature] + sparse_feature + [label]))

        return reader


d = CriteoDataset()
d.run_from_stdin()
