"""The tests of the `integration` tier, by module (tests/conftest.py marks them; `make test-unit` leaves them out).

A test is here when it runs a real pipeline -- trains a model, prepares or tokenizes a real corpus, loads a real model
or runs a command in a subprocess -- which is what made it take 0.3 s or more in a measured run of the fast tier
(2026-12-04, 2 cores under load; the list is that run's, with its parametrizations folded into one name). "*" is a
whole module. A test that uses a module-scoped fixture of its own module that one of these uses is marked too (the
fixture is the expensive part). A new test that trains or spawns: mark it @pytest.mark.integration, or add it here.
tests/test_tiers.py fails when a name here is no longer a test (renamed or removed).
"""

INTEGRATION = {
    "test_canaries": {
        "test_a_background_only_control_keeps_the_canaries_untrained",
        "test_canaries_and_validation_leave_members_and_nonmembers_alone",
        "test_each_canary_is_read_its_label_whole_in_one_row_from_ordinary_ids",
        "test_exposure_of_a_real_model_matches_a_direct_ranking_of_the_whole_space",
        "test_skew_normal_extrapolation_recovers_a_normal_tail",
        "test_the_chain_rule_enumeration_equals_scoring_every_secret_directly",
    },
    "test_configs": {
        "test_config_loads_through_its_dataclass",
        "test_every_data_recipe_dry_runs_on_its_first_documents",
        "test_every_experiment_dry_runs_without_problems",
        "test_paper_configs_read_each_target_as_the_paper_and_never_cycle_the_background",
        "test_single_pass_finetune_reads_every_target_once_from_each_sizes_own_model",
        "test_the_example_in_the_experiment_docstring_is_a_valid_experiment",
    },
    "test_data_cli": {"test_existing_folder_is_left_untouched", "test_prepare_command_runs_and_summarises"},
    "test_data_dedup": {"test_prepare_leaves_edited_copies_of_targets_out_of_the_background"},
    "test_data_main_stream": {"*"},
    "test_data_prepare": {
        "test_deterministic",
        "test_later_chunk_is_the_next_tokens_of_the_same_article",
        "test_manifest_contract",
        "test_members_nonmembers_disjoint",
        "test_not_enough_documents",
        "test_one_per_row_padding",
        "test_random_split_takes_the_same_stretch_of_other_articles",
        "test_seed_changes_the_split",
    },
    "test_data_jsontext": {
        "test_a_prepare_that_reads_long_lines_in_pieces_writes_the_same_bytes",
        "test_long_documents_written_as_they_are_tokenized_are_the_whole_documents_chunks",
    },
    "test_data_sources": {
        "test_kjv_chapters",
        "test_wikipedia_is_real_prose",  # the real Wikipedia dump, read
        "test_wikipedia_min_words_and_cap",
    },
    "test_data_store": {"*"},
    "test_data_stream": {
        "test_a_corrupt_shard_is_one_line_at_merge_and_at_load",
        "test_a_killed_prepare_resumes_to_the_same_bytes",
        "test_a_vocabulary_too_large_for_the_dtype_is_one_line",
        "test_caps_take_the_first_chunks_of_the_first_documents",
        "test_merge_names_a_missing_shard_and_another_recipes_shards",
        "test_the_streamed_background_is_every_accepted_chunk_once",
        "test_two_workers_and_independent_jobs_write_the_same_bytes",
    },
    "test_data_tokenizers": {"test_gpt2_published_ids", "test_local_folder_roundtrip"},
    "test_data_variants": {"test_prepared_folder_trains_on_variants_and_evaluates_the_member"},
    "test_eval_adversary": {
        "test_batched_mask_consistent_decoding_equals_the_per_step_reference",
        "test_goldfish_eval_with_the_mask_consistent_adversary",
        "test_next_token_drops_canonical_equals_masking_each_extended_row",
    },
    "test_eval_audit": {"test_a_corpus_is_audited_document_by_document", "test_a_folder_of_text_files_is_a_corpus_too"},
    "test_eval_baseline": {"test_formula_matches_a_simulated_model"},
    "test_eval_cli": {
        "test_a_failed_rerun_without_resume_keeps_the_earlier_results",
        "test_cli_writes_results_following_the_schema",
        "test_groups_from_a_jsonl_field",
        "test_killed_membership_run_resumes_without_rescoring",
        "test_membership_only_mode",
        "test_prepared_folder_input",
        "test_resume_refusal_and_overwrite",
        "test_user_errors_are_one_line",
    },
    "test_eval_conventions": {
        "test_a_hub_id_is_evaluated_from_the_hf_cache_offline",
        "test_eval_without_a_terminal_logs_each_phase",
        "test_extraction_progress_moves_per_batch_not_per_chunk",
        "test_lm_eval_flags_and_results_layout",
    },
    "test_eval_dtype": {
        "test_a_faster_precision_is_one_flag_away_and_the_report_says_so",
        "test_eval_of_an_fp32_checkpoint_agrees_with_batch1_generate",
    },
    "test_eval_extraction": {"test_sample_hits_count_reproductions"},
    "test_eval_generate": {
        "test_batch_size_does_not_change_tokens",
        "test_batched_greedy_equals_batch1_generate",
        "test_beam_search_equals_batch1_generate",
        "test_sampling_is_seeded_and_low_temperature_is_greedy",
        "test_stop_at_eos_matches_plain_generate_both_ways",
    },
    "test_eval_membership": {"test_loss_attack_separates_trained_members"},
    "test_eval_reference_free": {"test_both_attacks_are_in_the_membership_table"},
    "test_eval_report": {
        "test_one_colour_per_arm_in_every_figure_and_a_vector_copy",
        "test_plot_primitives",
        "test_write_report_copes_with_missing_sections",
        "test_write_report_full",
    },
    "test_eval_stats": {
        "test_clustered_logistic_bootstrap_agrees_with_the_cluster_robust_standard_error",
        "test_logistic_regression_matches_statsmodels_and_firth_maximises_the_penalised_likelihood",
        "test_replicate_tost_keeps_its_5pct_error_at_the_margin_when_seeds_disagree",
    },
    "test_experiment_golden": {"test_the_study_outputs_are_the_pinned_ones"},
    "test_experiment_runner": {
        "test_a_cell_is_stale_by_the_commands_own_fingerprints",
        "test_a_cell_two_runs_both_want_runs_once",
        "test_a_changed_config_does_not_reuse_finished_cells",
        "test_a_crash_resumes_with_only_the_unfinished_cells",
        "test_a_shard_without_the_control_leaves_its_arms_attacks_until_the_control_is_done",
        "test_a_trained_cell_is_not_retrained_when_eval_was_interrupted",
        "test_aggregation_matches_a_hand_computation",
        "test_each_value_of_an_axis_is_tested_against_the_reference_per_stratum_pooling_seeds",
        "test_only_runs_matching_cells_but_reports_every_finished_one",
        "test_report_has_the_expected_tables_and_plots",
        "test_summary_is_keyed_by_arm_when_each_arm_has_one_cell",
        "test_the_control_cell_trains_nothing_and_is_evaluated_like_the_arms",
        "test_the_mask_consistent_attack_of_each_goldfish_cell_is_a_report_table",
        "test_two_shards_run_side_by_side_into_one_folder",
    },
    "test_experiment_start": {"test_a_fine_tune_prepares_with_the_model_tokenizer_and_calibrates_by_the_control"},
    "test_exposure_sweep": {
        "test_the_exposure_counts_are_what_the_training_loop_read",
        "test_the_loss_gap_split_by_the_mask_equals_a_recount_from_the_cells_files",
    },
    "test_exposures": {
        "test_a_budget_of_whole_epochs_multiplies_every_label_exactly",
        "test_the_training_loop_reads_exactly_the_counted_rows",
    },
    "test_faults": {
        "test_a_kill_that_comes_too_late_is_retried_and_never_passes_silently",
        "test_a_stale_experiment_cell_is_replaced_only_when_its_rerun_is_done",
        "test_a_started_experiment_cell_with_another_config_is_refused",
        "test_an_interrupted_two_rename_replacement_is_recovered",
        "test_model_and_data_tokenizers_are_compared_by_identity_not_size",
        "test_prepare_killed_at_random_moments_gives_the_same_bytes",
        "test_two_prepares_into_one_folder_write_it_once",
    },
    "test_faults_bounded": {"test_a_long_document_tokenized_in_pieces_has_exactly_the_whole_documents_ids"},
    "test_faults_cards": {"*"},
    "test_faults_debris": {"test_prepare_into_a_missing_folder_does_not_rename_a_users_old_into_place"},
    "test_faults_experiments": {
        "test_a_cell_finished_meanwhile_with_the_same_config_is_skipped",
        "test_report_only_refuses_cells_made_with_another_config",
        "test_rerun_stale_does_not_replace_what_another_run_finished_meanwhile",
    },
    "test_faults_fooled": {
        "test_a_killed_run_does_not_resume_on_rows_an_edited_manifest_describes",
        "test_merge_refuses_shards_written_while_the_source_changed_between_jobs",
    },
    "test_faults_foreign": {
        "test_a_linked_background_folder_is_read_but_nothing_behind_it_is_deleted",
        "test_an_entry_naming_files_of_another_shard_deletes_none_of_them",
        "test_the_merge_deletes_only_the_unused_shards_entries_files",
        "test_update_card_of_a_cached_snapshot_given_as_a_folder_or_a_link_to_it_leaves_the_cache",
    },
    "test_faults_oneline": {"test_a_damaged_prepare_state_is_one_line", "test_a_damaged_shard_entry_is_one_line"},
    "test_faults_paths": {
        "test_a_source_that_is_a_fifo_is_one_line_not_a_hang",
        "test_a_txt_file_with_a_non_utf8_name_is_one_line",
        "test_prepare_source_path_under_a_file_is_one_line",
    },
    "test_faults_replace": {"*"},
    "test_faults_series": {
        "test_a_reference_model_that_reads_other_text_is_refused",
        "test_a_reference_model_with_the_datas_tokenizer_is_used",
    },
    "test_golden": {"*"},  # two tiny training runs: under a second each, but they train
    "test_gpu_check": {"*"},
    "test_hf_trainer": {"*"},
    "test_integrations": {
        "test_accelerate_example_on_one_process_is_the_plain_goldfish_step",
        "test_trl_sft_trainer_trains_on_the_goldfish_labels",
    },
    "test_mask_cli": {"test_mask_command_json_matches_library", "test_mask_command_marks_dropped_tokens"},
    "test_masks": {"test_mask_identical_in_another_process"},
    "test_masks_canonical": {
        "test_canonical_matches_string_reference_with_documents_and_specials",
        "test_config_collator_and_yaml",
        "test_mask_command_with_canonical",
        "test_mask_identical_in_another_process",
    },
    "test_modelcard": {
        "test_eval_update_card_adds_model_index_results_once",
        "test_results_of_other_data_are_kept_beside_not_over",
    },
    "test_packaging": {"test_every_third_party_import_is_declared", "test_the_scan_sees_the_package"},
    "test_parallel_engine": {"test_single_process_engine_matches_reference_and_bf16_stays_close"},
    "test_series": {
        "test_a_rerun_evaluates_nothing_again_and_settings_are_fingerprinted",
        "test_a_runs_checkpoints_are_exported_evaluated_and_recounted",
    },
    "test_size_sweep": {
        "test_background_only_rows_hold_no_member_and_keep_the_evaluation_splits",
        "test_prefix_collisions_by_hand_and_none_in_a_prepared_folder_of_unique_texts",
        "test_the_tokenizer_is_trained_on_its_own_corpus_only",
        "test_tuning_picks_each_size_value_from_background_controls_then_runs_the_arms_there",
    },
    "test_threshold": {
        "test_the_interval_covers_a_known_threshold_under_steep_slopes",
        "test_the_joint_model_recovers_a_known_size_effect",
    },
    "test_tracking": {"test_tensorboard_holds_every_metrics_jsonl_scalar"},
}
