"""Exchanges of the current Cursus broker dialect (``dialect = "2026-08"``), request and reply byte
for byte, in the order one scenario sends them.

Every reply was derived by reading the upstream broker's source at commit ``4373c0a`` (the
function named beside each group; file paths are in that repository). ``{m1}``/``{m2}`` stand
for the member ids the broker hands out on JOIN_GROUP (the requested id + ``-NNNN``): the replay
captures them from the JOIN_GROUP reply and substitutes them afterwards. ``{ts}`` is a time as Go's
encoding/json writes it. ``{host}``, ``{port}`` and ``{addr}`` (``host:port``) are the listener's
advertised address (the broker's
``advertised_client_host`` / ``advertised_broker_port``). Requests are sent in a
text envelope with topic ``admin`` (CREATE) or ``""`` (the rest), as the Go SDK does.
"""

from __future__ import annotations

DEFAULT_POLICY = (
    "cleanup_policy=delete partitioner=hash_key auth_policy=open read_acl= write_acl= "
    "retention_hours=0 retention_bytes=0"
)

# (request, reply)
SCENARIO: list[tuple[str, str]] = [
    # pkg/controller/command_handler.go handleCreate, parseTopicPolicy; pkg/topic/policy.go
    # Policy.Normalize; pkg/topic/metadata.go ValidateName; pkg/topic/manager.go
    # CreateTopicWithPolicy (an existing topic cannot shrink)
    (
        "CREATE topic=orders partitions=2 idempotent=false",
        f"OK topic=orders partitions=2 {DEFAULT_POLICY}",
    ),
    (
        "CREATE topic=orders partitions=2 idempotent=false",
        f"OK topic=orders partitions=2 {DEFAULT_POLICY}",
    ),
    (
        "CREATE topic=orders partitions=1 idempotent=false",
        "ERROR: create_topic_failed topic=orders "
        "reason=\"cannot decrease partition count for topic 'orders': 2 -> 1\"",
    ),
    (
        "CREATE partitions=2 idempotent=false",
        'ERROR: missing_topic expected="CREATE topic=<name> [partitions=<N>]"',
    ),
    (
        "CREATE topic=a/b partitions=2 idempotent=false",
        'ERROR: invalid_topic_name topic="a/b" '
        'reason="topic name \\"a/b\\" contains unsupported characters"',
    ),
    (
        "CREATE topic=x partitions=0 idempotent=false",
        'ERROR: invalid_partitions reason="must be a positive integer"',
    ),
    (
        "CREATE topic=x partitions=1 idempotent=false cleanup_policy=bogus",
        'ERROR: invalid_topic_policy reason="invalid cleanup policy \\"bogus\\""',
    ),
    (
        "CREATE topic=x partitions=1 idempotent=false partitioner=random",
        'ERROR: invalid_topic_policy reason="invalid partitioner \\"random\\""',
    ),
    (
        "CREATE topic=x partitions=1 idempotent=false retention_hours=z",
        "ERROR: invalid_retention_hours value=z",
    ),
    (
        "CREATE topic=x partitions=1 idempotent=false replication_factor=0",
        'ERROR: invalid_replication_factor reason="must be a positive integer"',
    ),
    (
        "CREATE topic=x partitions=3 idempotent=true partitioner=ROUND_ROBIN retention_hours=24",
        "OK topic=x partitions=3 cleanup_policy=delete partitioner=round_robin auth_policy=open "
        "read_acl= write_acl= retention_hours=24 retention_bytes=0",
    ),
    # pkg/controller/produce_handler.go handlePublish (standalone); pkg/topic/topic.go
    # getPartitionIndex (hash_key: FNV-1a 64 of key=, util/hash.go GenerateID); the ack is
    # types.AckResponse as encoding/json writes it
    (
        "PUBLISH topic=orders acks=1 producerId=p9 partition=1 message=hello world",
        '{"status":"OK","last_offset":0,"producer_epoch":0,"producer_id":"p9","seq_start":0,'
        '"seq_end":0}',
    ),
    (
        "PUBLISH topic=orders acks=-1 producerId=p9 key=k1 seqNum=7 epoch=3 message=keyed",
        '{"status":"OK","last_offset":1,"producer_epoch":3,"producer_id":"p9","seq_start":7,'
        '"seq_end":7}',
    ),  # FNV-1a("k1") % 2 = 1: the second record of partition 1
    ("PUBLISH topic=orders acks=0 producerId=p9 partition=0 message=fire", "OK"),
    ("PUBLISH acks=1 producerId=p9 message=m", "ERROR: missing_topic command=PUBLISH"),
    ("PUBLISH topic=orders producerId=p9", "ERROR: missing_message command=PUBLISH"),
    ("PUBLISH topic=orders message=m", "ERROR: missing_producer_id command=PUBLISH"),
    (
        "PUBLISH topic=orders producerId=p9 isIdempotent=maybe message=m",
        "ERROR: invalid_is_idempotent value=maybe",
    ),
    ("PUBLISH topic=orders producerId=p9 acks=2 message=m", "ERROR: invalid_acks value=2"),
    (
        "PUBLISH topic=orders producerId=p9 seqNum=-1 message=m",
        'ERROR: invalid_seq_num reason="strconv.ParseUint: parsing \\"-1\\": invalid syntax"',
    ),
    (
        "PUBLISH topic=orders producerId=p9 epoch=e message=m",
        'ERROR: invalid_epoch reason="strconv.ParseInt: parsing \\"e\\": invalid syntax"',
    ),
    (
        "PUBLISH topic=orders producerId=p9 partition=p message=m",
        'ERROR: invalid_partition reason="strconv.Atoi: parsing \\"p\\": invalid syntax"',
    ),
    ("PUBLISH topic=nope producerId=p9 message=m", "ERROR: topic_not_found topic=nope"),
    (
        "PUBLISH topic=orders producerId=p9 partition=5 message=m",
        "ERROR: partition_not_found partition=5",
    ),
    # pkg/controller/consume_handler.go validateConsumeSyntax, validateStreamSyntax
    ("CONSUME topic=orders partition=0 offset=0", "ERROR: invalid_consume_syntax"),
    ("STREAM topic=orders partition=0", "ERROR: invalid_stream_syntax"),
    # pkg/controller/topic_query_handler.go handleList (formatTopicList), handleDescribeTopic
    # (json.MarshalIndent, two spaces; Policy's omitempty fields)
    ("LIST", "OK count=2 topics=orders,x"),
    (
        "DESCRIBE topic=x",
        '{\n  "status": "OK",\n  "topic": "x",\n  "partitions": [\n'
        + ",\n".join(
            f'    {{\n      "id": {i},\n      "leader": "",\n      "replicas": null,\n'
            '      "isr": null,\n      "leo": 0,\n      "hwm": 0\n    }'
            for i in range(3)
        )
        + '\n  ],\n  "policy": {\n    "retention_hours": 24,\n    "cleanup_policy": "delete",\n'
        '    "partitioner": "round_robin",\n    "auth_policy": "open"\n  }\n}',
    ),
    ("DESCRIBE topic=nope", "ERROR: topic_not_found topic=nope"),
    ("DESCRIBE x=1", 'ERROR: missing_topic expected="DESCRIBE topic=<name>"'),
    # pkg/controller/topic_query_handler.go handleMetadata (standalone: every leader is this
    # broker, epochs 0, the topic's policy)
    (
        "METADATA topic=x",
        "OK topic=x partitions=3 leaders={addr},{addr},{addr} epochs=0,0,0 "
        "cleanup_policy=delete partitioner=round_robin auth_policy=open read_acl= write_acl= "
        "retention_hours=24 retention_bytes=0",
    ),
    ("METADATA topic=nope", "ERROR: topic_not_found topic=nope"),
    ("METADATA x=1", "ERROR: missing_topic command=METADATA"),
    # command_handler.go handleFindCoordinator (standalone)
    (
        "FIND_COORDINATOR group=g1",
        "OK coordinator_id=standalone coordinator_type=group host={host} port={port}",
    ),
    (
        "FIND_COORDINATOR transactional_id=tx1",
        "OK coordinator_id=standalone coordinator_type=transaction host={host} port={port}",
    ),
    ("FIND_COORDINATOR x=1", "ERROR: missing_coordinator_key command=FIND_COORDINATOR"),
    # handleDelete
    ("DELETE topic=x", "OK topic=x deleted=true"),
    ("DELETE topic=x", "ERROR: topic_not_found topic=x"),
    (
        "DELETE topic=a/b",
        'ERROR: invalid_topic_name topic="a/b" '
        'reason="topic name \\"a/b\\" contains unsupported characters"',
    ),
    ("DELETE x=1", 'ERROR: missing_topic expected="DELETE topic=<name>"'),
    # handleRegisterGroup; pkg/coordinator/rebalancer.go RegisterGroup
    ("REGISTER_GROUP topic=orders group=g9", "OK group=g9 topic=orders registered=true"),
    ("REGISTER_GROUP topic=orders group=g9", "OK group=g9 topic=orders registered=true"),
    ("REGISTER_GROUP topic=orders", "ERROR: missing_group command=REGISTER_GROUP"),
    ("REGISTER_GROUP topic=nope group=g9", "ERROR: topic_not_found topic=nope"),
    # handleFetchOffset
    ("FETCH_OFFSET topic=orders partition=0 group=g1", "ERROR: group_not_found group=g1"),
    ("FETCH_OFFSET topic=orders partition=0", "ERROR: missing_group command=FETCH_OFFSET"),
    ("FETCH_OFFSET topic=orders group=g1", "ERROR: missing_partition command=FETCH_OFFSET"),
    ("FETCH_OFFSET topic=orders partition=z group=g1", "ERROR: invalid_partition"),
    # handleJoinGroup; pkg/coordinator/rebalancer.go AddConsumer (generation + 1, range)
    ("JOIN_GROUP topic=orders group=g1", "ERROR: missing_member command=JOIN_GROUP"),
    ("JOIN_GROUP topic=nope group=g0 member=c1", "ERROR: topic_not_found topic=nope"),
    (
        "JOIN_GROUP topic=orders group=g1 member=c1",
        "OK generation=1 member={m1} assignments=[0 1]",
    ),
    (
        "JOIN_GROUP topic=other group=g1 member=c1",
        "ERROR: topic_not_assigned_to_group expected=orders actual=other",
    ),
    # pkg/controller/command_handler.go handleGroupStatus; coordinator.go GetGroupStatus
    (
        "GROUP_STATUS group=g1",
        '{"status":"OK","group_name":"g1","topic_name":"orders","state":"Stable","generation":1,'
        '"member_count":1,"partition_count":2,"members":[{"member_id":"{m1}",'
        '"last_heartbeat":"{ts}","assignments":[0,1]}],"last_rebalance":"{ts}"}',
    ),
    ("GROUP_STATUS group=nog", "ERROR: group_status_failed reason=\"group 'nog' not found\""),
    ("GROUP_STATUS x=1", "ERROR: missing_group command=GROUP_STATUS"),
    # handleSyncGroup; pkg/coordinator/coordinator.go ResumeConsumer,
    # validateMemberGenerationLocked
    (
        "SYNC_GROUP topic=orders group=g1 member={m1}",
        "ERROR: missing_generation command=SYNC_GROUP",
    ),
    (
        "SYNC_GROUP topic=orders group=g1 member={m1} generation=x",
        "ERROR: invalid_generation command=SYNC_GROUP",
    ),
    (
        "SYNC_GROUP topic=orders group=g1 member={m1} generation=1",
        "OK generation=1 member={m1} assignments=[0 1]",
    ),
    (
        "SYNC_GROUP topic=orders group=g1 member=ghost generation=1",
        "ERROR: member_not_found member=ghost group=g1",
    ),
    # handleHeartbeat; pkg/coordinator/heartbeat.go RecordHeartbeatForGeneration
    (
        "HEARTBEAT topic=orders group=g1 member={m1} generation=1",
        "OK member={m1} generation=1",
    ),
    ("HEARTBEAT topic=orders group=g1 member={m1}", "ERROR: missing_generation command=HEARTBEAT"),
    (
        "HEARTBEAT topic=orders group=g1 member=ghost generation=1",
        "ERROR: member_not_found member=ghost group=g1",
    ),
    (
        "HEARTBEAT topic=orders group=nog member=ghost generation=1",
        "ERROR: group_not_found group=nog",
    ),
    # handleFetchOffset (nothing committed: OK offset=0)
    ("FETCH_OFFSET topic=orders partition=0 group=g1", "OK offset=0"),
    (
        "FETCH_OFFSET topic=other partition=0 group=g1",
        "ERROR: topic_not_assigned_to_group expected=orders actual=other",
    ),
    # handleCommitOffset; pkg/coordinator/coordinator.go ValidateOwnershipFailure;
    # formatCoordinatorError (offset regression)
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=5 generation=1 member={m1}",
        "OK",
    ),
    ("FETCH_OFFSET topic=orders partition=0 group=g1", "OK offset=5"),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=3 generation=1 member={m1}",
        'ERROR: offset_regression reason="offset regression group=g1 topic=orders partition=0 '
        'current=5 got=3"',
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=6 generation=0 member={m1}",
        "ERROR: GEN_MISMATCH current=1 requested=0 group=g1 member={m1}",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=7 group=g1 offset=6 generation=1 member={m1}",
        "ERROR: NOT_OWNER partition=7 member={m1} group=g1 generation=1",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=6 generation=1",
        "ERROR: missing_member command=COMMIT_OFFSET",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=6 member={m1}",
        "ERROR: missing_generation command=COMMIT_OFFSET",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=-1 generation=1 member={m1}",
        "ERROR: invalid_offset",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=-1 group=g1 offset=1 generation=1 member={m1}",
        "ERROR: invalid_partition",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 offset=1 generation=1 member={m1}",
        "ERROR: missing_group command=COMMIT_OFFSET",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=0 group=g1 offset=9 generation=1 member={m1} "
        "validate_only=true",
        "OK validated=true",
    ),
    # handleBatchCommit; pkg/coordinator/coordinator_offset.go ValidateAndCommitOffsetsBulk,
    # validateOffsetBatchLocked
    ("BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P0:6,P1:2", "OK batched=2"),
    ("FETCH_OFFSET topic=orders partition=1 group=g1", "OK offset=2"),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 P0:6",
        "ERROR: missing_member command=BATCH_COMMIT",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 member={m1} P0:6",
        "ERROR: missing_generation command=BATCH_COMMIT",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=one member={m1} P0:6",
        "ERROR: invalid_generation command=BATCH_COMMIT",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P0:6,P1",
        'ERROR: invalid_batch_commit_entry entry="P1"',
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} X0:6",
        'ERROR: invalid_partition entry="X0:6"',
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P0:z",
        'ERROR: invalid_offset entry="P0:z"',
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P5:1",
        "ERROR: NOT_OWNER partition=5 member={m1} group=g1 generation=1",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=0 member={m1} P0:7",
        "ERROR: GEN_MISMATCH current=1 requested=0 group=g1 member={m1}",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P0:7,P0:8",
        "ERROR: duplicate_partition partition=0 group=g1 topic=orders",
    ),
    (
        "BATCH_COMMIT topic=orders group=g1 generation=1 member={m1} P0:1",
        'ERROR: offset_regression reason="offset regression for group=g1 topic=orders '
        'partition=0: current=6 attempted=1"',
    ),
    (
        "BATCH_COMMIT topic=other group=g1 generation=1 member={m1} P0:1",
        "ERROR: topic_not_assigned_to_group expected=orders actual=other",
    ),
    # handleJoinGroup with generation= (ResumeConsumer)
    (
        "JOIN_GROUP topic=orders group=g1 member={m1} generation=1",
        "OK generation=1 member={m1} assignments=[0 1] resumed=true",
    ),
    (
        "JOIN_GROUP topic=orders group=g1 member={m1} generation=0",
        "ERROR: GEN_MISMATCH current=1 requested=0 group=g1 member={m1}",
    ),
    (
        "JOIN_GROUP topic=orders group=g1 member={m1} generation=x",
        "ERROR: invalid_generation command=JOIN_GROUP",
    ),
    # a second member: AddConsumer rebalances (range over sorted member ids)
    (
        "JOIN_GROUP topic=orders group=g1 member=c2",
        "OK generation=2 member={m2} assignments=[1]",
    ),
    (
        "HEARTBEAT topic=orders group=g1 member={m1} generation=1",
        "ERROR: GEN_MISMATCH current=2 requested=1 group=g1 member={m1}",
    ),
    (
        "SYNC_GROUP topic=orders group=g1 member={m1} generation=2",
        "OK generation=2 member={m1} assignments=[0]",
    ),
    (
        "COMMIT_OFFSET topic=orders partition=1 group=g1 offset=9 generation=2 member={m1}",
        "ERROR: NOT_OWNER partition=1 member={m1} group=g1 generation=2",
    ),
    # handleLeaveGroup; RemoveConsumerForGeneration
    (
        "LEAVE_GROUP topic=orders group=g1 member={m2}",
        "ERROR: missing_generation command=LEAVE_GROUP",
    ),
    (
        "LEAVE_GROUP topic=orders group=g1 member={m2} generation=1",
        "ERROR: GEN_MISMATCH current=2 requested=1 group=g1 member={m2}",
    ),
    (
        "LEAVE_GROUP topic=orders group=g1 member={m2} generation=2",
        "OK group=g1 member={m2} left=true",
    ),
]
