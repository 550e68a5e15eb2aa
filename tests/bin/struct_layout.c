/*
 * struct_layout.c - the layout of the public value structs that python/fleet_c mirrors
 * with ctypes, for tests/python/test_struct_layout.py to compare against.
 *
 *   struct_layout
 *
 * Prints one "STRUCT <name> <sizeof> <alignof>" line per struct, each followed by one
 * "FIELD <name> <offsetof> <sizeof>" line per field, in declaration order.  A struct
 * added to the Python mirror gets a block here.
 */
#include <stddef.h>
#include <stdio.h>

#include <fleet.h>

#define S(type) printf("STRUCT %s %zu %zu\n", #type, sizeof(type), _Alignof(type))
#define F(type, field) printf("FIELD %s %zu %zu\n", #field, offsetof(type, field), sizeof(((type *)0)->field))

int main(void)
{
    S(fl_initializer);
    F(fl_initializer, kind);
    F(fl_initializer, a);
    F(fl_initializer, b);
    F(fl_initializer, seed);

    S(fl_param_attr);
    F(fl_param_attr, name);
    F(fl_param_attr, init);
    F(fl_param_attr, learning_rate);
    F(fl_param_attr, l2_decay);
    F(fl_param_attr, frozen);
    F(fl_param_attr, l1_decay);

    S(fl_fc_attr);
    F(fl_fc_attr, num_flatten_dims);
    F(fl_fc_attr, weight);
    F(fl_fc_attr, bias);
    F(fl_fc_attr, no_bias);

    S(fl_embedding_attr);
    F(fl_embedding_attr, is_sparse);
    F(fl_embedding_attr, is_distributed);
    F(fl_embedding_attr, has_padding_idx);
    F(fl_embedding_attr, padding_idx);
    F(fl_embedding_attr, param);

    S(fl_conv2d_attr);
    F(fl_conv2d_attr, stride);
    F(fl_conv2d_attr, padding);
    F(fl_conv2d_attr, dilation);
    F(fl_conv2d_attr, groups);
    F(fl_conv2d_attr, filter);
    F(fl_conv2d_attr, bias);
    F(fl_conv2d_attr, no_bias);

    S(fl_conv2d_transpose_attr);
    F(fl_conv2d_transpose_attr, stride);
    F(fl_conv2d_transpose_attr, padding);
    F(fl_conv2d_transpose_attr, dilation);
    F(fl_conv2d_transpose_attr, groups);
    F(fl_conv2d_transpose_attr, output_size);
    F(fl_conv2d_transpose_attr, output_padding);
    F(fl_conv2d_transpose_attr, padding_algorithm);
    F(fl_conv2d_transpose_attr, filter);
    F(fl_conv2d_transpose_attr, bias);
    F(fl_conv2d_transpose_attr, no_bias);

    S(fl_pool2d_attr);
    F(fl_pool2d_attr, pool_size);
    F(fl_pool2d_attr, stride);
    F(fl_pool2d_attr, padding);
    F(fl_pool2d_attr, global_pooling);
    F(fl_pool2d_attr, inclusive);
    F(fl_pool2d_attr, ceil_mode);

    S(fl_batch_norm_attr);
    F(fl_batch_norm_attr, scale);
    F(fl_batch_norm_attr, bias);
    F(fl_batch_norm_attr, moving_mean_name);
    F(fl_batch_norm_attr, moving_variance_name);
    F(fl_batch_norm_attr, use_global_stats);

    S(fl_feed);
    F(fl_feed, name);
    F(fl_feed, value);

    S(fl_exe_dataset_stats);
    F(fl_exe_dataset_stats, instances);
    F(fl_exe_dataset_stats, batches);
    F(fl_exe_dataset_stats, seconds);
    F(fl_exe_dataset_stats, nfetch);
    F(fl_exe_dataset_stats, fetch);

    S(fleet_dgc_stats);
    F(fleet_dgc_stats, params);
    F(fleet_dgc_stats, dense_steps);
    F(fleet_dgc_stats, sparse_steps);
    F(fleet_dgc_stats, dense_bytes);
    F(fleet_dgc_stats, sparse_bytes);

    S(fleet_user_role);
    F(fleet_user_role, is_collective);
    F(fleet_user_role, current_id);
    F(fleet_user_role, role);
    F(fleet_user_role, worker_num);
    F(fleet_user_role, worker_endpoints);
    F(fleet_user_role, n_worker_endpoints);
    F(fleet_user_role, server_endpoints);
    F(fleet_user_role, n_server_endpoints);

    S(fl_data_image_options);
    F(fl_data_image_options, batch_size);
    F(fl_data_image_options, threads);
    F(fl_data_image_options, prefetch);
    F(fl_data_image_options, train);
    F(fl_data_image_options, crop);
    F(fl_data_image_options, resize);
    F(fl_data_image_options, scale);
    F(fl_data_image_options, ratio);
    F(fl_data_image_options, flip);
    F(fl_data_image_options, mean);
    F(fl_data_image_options, std);
    F(fl_data_image_options, shuffle);
    F(fl_data_image_options, drop_last);
    F(fl_data_image_options, seed);
    F(fl_data_image_options, rank);
    F(fl_data_image_options, nranks);
    F(fl_data_image_options, skip_bad);
    F(fl_data_image_options, dct_scale);

    S(fl_model_resnet_config);
    F(fl_model_resnet_config, input_name);
    F(fl_model_resnet_config, label_name);
    F(fl_model_resnet_config, channels);
    F(fl_model_resnet_config, height);
    F(fl_model_resnet_config, width);
    F(fl_model_resnet_config, depth);
    F(fl_model_resnet_config, base_filters);
    F(fl_model_resnet_config, imagenet_stem);
    F(fl_model_resnet_config, num_classes);
    F(fl_model_resnet_config, stride_in_1x1);

    S(fl_model_vgg_config);
    F(fl_model_vgg_config, input_name);
    F(fl_model_vgg_config, label_name);
    F(fl_model_vgg_config, channels);
    F(fl_model_vgg_config, height);
    F(fl_model_vgg_config, width);
    F(fl_model_vgg_config, depth);
    F(fl_model_vgg_config, base_filters);
    F(fl_model_vgg_config, fc_dim);
    F(fl_model_vgg_config, dropout);
    F(fl_model_vgg_config, num_classes);

    S(fl_model_resnet);
    F(fl_model_resnet, input);
    F(fl_model_resnet, label);
    F(fl_model_resnet, predict);
    F(fl_model_resnet, loss);
    _Static_assert(
        sizeof(fl_model_vgg) == sizeof(fl_model_resnet) && offsetof(fl_model_vgg, loss) == offsetof(fl_model_resnet, loss),
        "fl_model_vgg and fl_model_resnet share the Python mirror ImageModel");

    S(fl_app_config);  /* opaque to Python */
    S(fleet_strategy); /* opaque to Python: only its size and alignment are compared */
    return 0;
}
