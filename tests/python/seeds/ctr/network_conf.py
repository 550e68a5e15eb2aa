# The seed train.py's network_conf module (not shown in the seed): Paddle's CTR-DNN, written
# with Paddle 2.x names (imports changed to fleet_c).
import math

import fleet_c as paddle


def ctr_dnn_model_dataset(dense_input, sparse_inputs, label, embedding_size, sparse_feature_dim):
    def embedding_layer(input):
        emb = paddle.static.nn.embedding(
            input=input,
            is_sparse=True,
            is_distributed=False,
            size=[sparse_feature_dim, embedding_size],
            param_attr=paddle.ParamAttr(name="SparseFeatFactors",
                                        initializer=paddle.nn.initializer.Uniform()))
        return paddle.static.nn.sequence_pool(input=emb, pool_type='sum')

    sparse_embed_seq = list(map(embedding_layer, sparse_inputs))
    concated = paddle.concat(sparse_embed_seq + [dense_input], axis=1)
    fc1 = paddle.static.nn.fc(
        x=concated, size=400, activation='relu',
        weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1 / math.sqrt(concated.shape[1]))))
    fc2 = paddle.static.nn.fc(
        x=fc1, size=400, activation='relu',
        weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1 / math.sqrt(fc1.shape[1]))))
    fc3 = paddle.static.nn.fc(
        x=fc2, size=400, activation='relu',
        weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1 / math.sqrt(fc2.shape[1]))))
    predict = paddle.static.nn.fc(
        x=fc3, size=2, activation='softmax',
        weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1 / math.sqrt(fc3.shape[1]))))

    cost = paddle.nn.functional.cross_entropy(input=predict, label=label, reduction='none', use_softmax=False)
    avg_cost = paddle.sum(x=cost)
    auc_var, batch_auc_var, _ = paddle.static.auc(input=predict, label=label, num_thresholds=2 ** 12,
                                                 slide_steps=20)
    return avg_cost, auc_var, batch_auc_var
