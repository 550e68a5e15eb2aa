"""fluid.contrib.utils (1.x): HDFSClient and multi_download, which programs import (deepFM,
simnet_bow) and use only to fetch data from HDFS.  fleet_c reads local (or mounted) files:
both raise NotImplementedError saying so when called; importing them works."""

__all__ = ["HDFSClient", "multi_download"]

_WHY = "HDFS is not supported by fleet_c: copy the files to a local or mounted directory and read them from there"


class HDFSClient:
    def __init__(self, hadoop_home=None, configs=None, *args, **kwargs):
        raise NotImplementedError("fluid.contrib.utils.HDFSClient: " + _WHY)


def multi_download(client=None, hdfs_path=None, local_path=None, trainer_id=0, trainers=1, multi_processes=5,
                   *args, **kwargs):
    raise NotImplementedError("fluid.contrib.utils.multi_download: " + _WHY)
