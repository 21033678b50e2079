import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const TenantId = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const TaskId = defineSearchAttributeKey('TaskId', SearchAttributeType.KEYWORD);
export const ConfigId = defineSearchAttributeKey('ConfigId', SearchAttributeType.KEYWORD);
export const RegistrationId = defineSearchAttributeKey('RegistrationId', SearchAttributeType.KEYWORD);
export const DeliveryStatus = defineSearchAttributeKey('DeliveryStatus', SearchAttributeType.KEYWORD);

export const SEARCH_ATTRIBUTES = [TenantId, TaskId, ConfigId, RegistrationId, DeliveryStatus];
